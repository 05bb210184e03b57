"""Incremental detokenization: pieces emitted token by token concatenate to the full decode, and a
character split over several byte tokens appears only once it is complete."""

from __future__ import annotations

import pytest
from tests.support.tiny import make_tokenizer

from inspector.models.detokenize import Detokenizer, detokenize
from inspector.models.tokenizer import Tokenizer

TEXTS = [
    "Robots 🤖 and thumbs 👍🏽 and a family 👨‍👩‍👧!",
    "日本語のテキストと中文字符",
    "café naïve Ünïcödé crème brûlée",
    "mixed: Größe 😀 東京 ok\n",
]


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer(make_tokenizer(), {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}, {})


def check_incremental(tok: Tokenizer, text: str) -> None:
    ids = tok.encode(text)
    d = Detokenizer(tok)
    pieces = [d.add(i) for i in ids]
    tail = d.finish()
    assert tail == ""
    assert "".join(pieces) == d.text == tok.decode(ids) == text
    assert all("\ufffd" not in p for p in pieces)  # never half a character
    return pieces


@pytest.mark.parametrize("text", TEXTS)
def test_incremental_equals_full_decode(tok, text):
    pieces = check_incremental(tok, text)
    # the tiny vocabulary has no merges for these characters, so some tokens must complete nothing
    assert "" in pieces


def test_partial_character_waits(tok):
    ids = tok.encode("日")  # 3 UTF-8 bytes
    assert b"".join(tok.token_bytes(i) for i in ids) == "日".encode()
    assert len(ids) > 1
    d = Detokenizer(tok)
    assert d.add(ids[0]) == "" and d.pending
    out = [d.add(i) for i in ids[1:]]
    assert out[-1] == "日" and not d.pending


def test_special_tokens_add_no_text(tok):
    ids = tok.encode("hi") + [tok.eos_id] + tok.encode(" there")
    assert detokenize(tok, ids) == "hi there"


def test_unfinished_character_flushes_as_replacement(tok):
    ids = tok.encode("🤖")
    d = Detokenizer(tok)
    for i in ids[:-1]:
        d.add(i)
    assert d.text == "" and d.finish() == "\ufffd"


@pytest.mark.slow
@pytest.mark.parametrize("text", TEXTS)
def test_default_tokenizer(default_model, text):
    check_incremental(default_model.tokenizer, text)
