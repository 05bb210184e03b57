"""The tokenizer wrapper: round trips, special tokens, display pieces, chat template (tiny and real)."""

from __future__ import annotations

import pytest
from tests.support.tiny import tiny_llama_dir  # noqa: F401  (fixture)

from inspector.errors import InputError
from inspector.models.tokenizer import Tokenizer

VARIED = [
    "Hello, world!",
    "naïve café, Straße, Ελληνικά, 日本語のテキスト, العربية",
    "emoji 🤖👩‍👩‍👧 and flags 🇫🇷",
    "def f(x):\n\treturn {'a': x ** 2}  # comment\n",
    "digits 1234567890 and 3.14159, -42, 1e-5",
    "whitespace   runs\t\t and\r\n line  ends \n\n\n",
    "\n\n  0.",
    "   leading and trailing   ",
    "<|im_start|>user\nhi<|im_end|>\n",
    "",
]


@pytest.fixture(scope="module")
def tiny_tok(tiny_llama_dir) -> Tokenizer:
    return Tokenizer.from_dir(tiny_llama_dir)


@pytest.mark.parametrize("text", VARIED)
def test_tiny_round_trip(tiny_tok, text):
    ids = tiny_tok.encode(text)
    assert tiny_tok.decode(ids) == text
    assert tiny_tok.decode_bytes(ids) == text.encode("utf-8")


def test_specials(tiny_tok):
    assert tiny_tok.special_ids == {0, 1, 2}
    assert (tiny_tok.bos_id, tiny_tok.eos_id) == (1, 2)
    ids = tiny_tok.encode("<|im_start|>user")
    assert ids[0] == 1 and tiny_tok.is_special(1) and not tiny_tok.is_special(ids[1])
    assert tiny_tok.piece(2) == "<|im_end|>"
    assert tiny_tok.encode("hi", add_bos=True)[0] == 1


def test_pieces_make_whitespace_visible(tiny_tok):
    ids = tiny_tok.encode("a b\n\tc")
    shown = "".join(tiny_tok.pieces(ids))
    assert shown == "a␣b↵⇥c"


def test_partial_utf8_pieces_show_bytes(tiny_tok):
    ids = tiny_tok.encode("🤖")  # 4 bytes, not a merge in the tiny vocab: one token per byte
    assert len(ids) == 4
    assert tiny_tok.pieces(ids) == ["<0xF0>", "<0x9F>", "<0xA4>", "<0x96>"]
    assert tiny_tok.token_bytes(ids[0]) == b"\xf0"


def test_chat_template(tiny_tok):
    assert tiny_tok.has_chat_template
    default = tiny_tok.render_chat("Hi")
    assert default == ("<|im_start|>system\nYou are a tiny test model.<|im_end|>\n"
                       "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    custom = tiny_tok.render_chat("Hi", system="Be brief.", add_generation_prompt=False)
    assert custom == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"


def test_no_chat_template_is_input_error(tiny_llama_dir, tmp_path):
    import shutil

    d = shutil.copytree(tiny_llama_dir, tmp_path / "nochat")
    (d / "tokenizer_config.json").write_text("{}")
    tok = Tokenizer.from_dir(d)
    assert not tok.has_chat_template and tok.eos_id == 2  # falls back to config.json ids
    with pytest.raises(InputError, match="no chat template"):
        tok.render_chat("hi")


def test_chat_template_jinja_file_wins(tiny_llama_dir, tmp_path):
    import shutil

    d = shutil.copytree(tiny_llama_dir, tmp_path / "jinja")
    (d / "chat_template.jinja").write_text("{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}")
    assert Tokenizer.from_dir(d).render_chat("x", add_generation_prompt=False) == "[user]x"


# ---- the real default model (SmolLM2-135M-Instruct)
MORE = VARIED + [
    "The year 2024 had 366 days; π ≈ 3.14159265358979.",
    "SELECT * FROM users WHERE id = 42;\n",
    "    indented code\n        more\n",
    "Mixed\u00a0nbsp\u200bzero-width\ufeffbom",
    "x" * 300,
]


@pytest.mark.slow
def test_real_round_trip(default_model):
    tok = default_model.tokenizer
    for text in MORE:
        ids = tok.encode(text)
        assert tok.decode(ids) == text, text
        assert tok.decode_bytes(ids) == text.encode("utf-8"), text


@pytest.mark.slow
def test_real_digits_are_single_tokens(default_model):
    tok = default_model.tokenizer
    ids = tok.encode("Pi is 3.14159 and 2024 is a year; 1000000.")
    digit_pieces = [p for p in tok.pieces(ids) if any(c.isdigit() for c in p)]
    assert digit_pieces == list("314159") + list("2024") + list("1000000")
    assert tok.encode("Hello world 12345") == [19556, 905, 216, 33, 34, 35, 36, 37]


@pytest.mark.slow
def test_real_specials_and_vocab(default_model):
    tok = default_model.tokenizer
    assert tok.vocab_size == 49152
    assert tok.special_ids == set(range(17))
    assert (tok.bos_id, tok.eos_id) == (1, 2)
    assert tok.encode("<|im_start|>assistant\n<|im_end|>") == [1, 520, 9531, 198, 2]
    assert tok.pieces(tok.encode(" hi\n")) == ["␣hi", "↵"]


@pytest.mark.slow
def test_real_chatml(default_model):
    tok = default_model.tokenizer
    assert tok.render_chat("What is gravity?") == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nWhat is gravity?<|im_end|>\n<|im_start|>assistant\n")
    assert tok.render_chat("Hi", system="Be brief.") == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
