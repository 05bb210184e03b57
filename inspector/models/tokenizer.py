"""Text <-> token ids, and how each token should be shown to a person.

`Tokenizer.from_dir(dir)` wraps the `tokenizers` library around a tokenizer.json, with special-token
strings and the chat template from tokenizer_config.json (or chat_template.jinja) and config.json ids as a
fallback. `encode` never adds BOS/EOS by itself (`prompt_ids` adds BOS to a plain prompt when
tokenizer_config's add_bos_token asks for it); special-token text in the input (`<|im_start|>`) is
recognized as the special token. `render_chat` applies the chat template with jinja2 in a sandbox.
Text that is not valid Unicode (a lone surrogate: JSON can carry `"\\ud800"`, and a command line's
bytes that are not UTF-8 arrive as surrogate escapes) is read with each such code point as U+FFFD, the
way a browser encodes it, instead of failing inside the tokenizers library.

Display: `token_bytes(id)` gives the raw bytes a token stands for (byte-level `Ġ` -> b" ",
SentencePiece `▁` -> b" ", `<0x0A>` -> b"\\n"); `piece(id)` shows them with visible whitespace
(`␣` space, `↵` newline, `⇥` tab) and any bytes that are not complete UTF-8 as `<0xE2>`. A model id past
the tokenizer's pieces (an embedding padded past them, as Qwen2.5's 151,936 rows for 151,665 pieces) stands
for no bytes (`decode` skips it, as transformers' does) and shows as `<no piece #ID>`.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from inspector.errors import InputError, ModelLoadError

_VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}
_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (the alphabet of byte-level BPE vocabularies)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


CHAR_TO_BYTE = {c: b for b, c in _bytes_to_unicode().items()}


def valid_text(text: str) -> str:
    """`text` with every surrogate code point (not encodable as UTF-8) replaced by U+FFFD."""
    return _SURROGATE.sub("\ufffd", text)


def _token_str(value: Any) -> str | None:
    """tokenizer_config.json stores special tokens as "str" or {"content": "str", ...}."""
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ModelLoadError(f"cannot parse {path}: {exc}") from None


def _chat_template(directory: Path, tok_cfg: dict[str, Any]) -> str | None:
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    tmpl = tok_cfg.get("chat_template")
    if isinstance(tmpl, list):  # [{"name": "default", "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in tmpl if isinstance(t, dict)}
        tmpl = named.get("default") or next(iter(named.values()), None)
    return tmpl if isinstance(tmpl, str) else None


def _display(data: bytes) -> str:
    """Bytes as readable text: whitespace made visible, invalid/partial UTF-8 bytes as <0xNN>."""
    out, i = [], 0
    while i < len(data):
        for n in (1, 2, 3, 4):  # the shortest prefix that decodes is one character
            try:
                ch = data[i:i + n].decode("utf-8")
            except UnicodeDecodeError:
                continue
            out.append(_VISIBLE.get(ch, ch))
            i += n
            break
        else:
            out.append(f"<0x{data[i]:02X}>")
            i += 1
    return "".join(out)


NO_PIECE = "<no piece #{}>"  # how an id the tokenizer has no piece for shows


def _part_json(part: Any) -> str:
    """One part of a `tokenizers` tokenizer (its decoder, its pre-tokenizer) as the JSON it is saved as (its
    pickled state: nested parts included, a Sequence's too); "" for a part it does not have."""
    return part.__getstate__().decode("utf-8") if part is not None else ""


class Tokenizer:
    def __init__(self, tok: Any, tok_cfg: dict[str, Any] | None = None, model_cfg: dict[str, Any] | None = None,
                 chat_template: str | None = None) -> None:
        tok_cfg, model_cfg = tok_cfg or {}, model_cfg or {}
        self._tok = tok
        self.chat_template = chat_template
        self._bytes_cache: dict[int, bytes] = {}
        self._piece_cache: dict[int, str] = {}  # token id -> piece: the page shows every position's on every Step
        self.vocab_size: int = tok.get_vocab_size(with_added_tokens=True)
        # each part read on its own, not the whole tokenizer written out as JSON and parsed (its vocabulary and merges
        # with it: 0.8 s of a model load for Gemma 3's 262k tokens)
        self._byte_level = any("ByteLevel" in _part_json(part) for part in (tok.decoder, tok.pre_tokenizer))
        self.special_ids: set[int] = {i for i, added in tok.get_added_tokens_decoder().items() if added.special}
        self.bos_id = self._special_id(tok_cfg.get("bos_token"), model_cfg.get("bos_token_id"))
        self.eos_id = self._special_id(tok_cfg.get("eos_token"), model_cfg.get("eos_token_id"))
        self.bos_token = self._tok.id_to_token(self.bos_id) if self.bos_id is not None else ""
        # tokenizer_config's add_bos_token: plain prompts start with BOS (Gemma); chat templates write their own
        self.add_bos: bool = bool(tok_cfg.get("add_bos_token", False)) and self.bos_id is not None
        self.eos_token = self._tok.id_to_token(self.eos_id) if self.eos_id is not None else ""

    def _special_id(self, token: Any, fallback: Any) -> int | None:
        text = _token_str(token)
        if text is not None and self._tok.token_to_id(text) is not None:
            return self._tok.token_to_id(text)
        if isinstance(fallback, list):
            fallback = fallback[0] if fallback else None
        return int(fallback) if fallback is not None else None

    @classmethod
    def from_dir(cls, directory: str | Path) -> "Tokenizer":
        from tokenizers import Tokenizer as HFTokenizer

        directory = Path(directory)
        path = directory / "tokenizer.json"
        if not path.is_file():
            raise ModelLoadError(f"no tokenizer.json in {directory} (only tokenizer.json tokenizers are read)")
        try:
            tok = HFTokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises a bare Exception on malformed files
            raise ModelLoadError(f"cannot read {path}: {exc}") from None
        tok_cfg = _read_json(directory / "tokenizer_config.json")
        return cls(tok, tok_cfg, _read_json(directory / "config.json"), _chat_template(directory, tok_cfg))

    # ---- ids <-> text
    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        """Token ids of `text`; special-token strings inside it become their special ids."""
        ids = self._tok.encode(valid_text(text), add_special_tokens=False).ids
        return [self.bos_id, *ids] if add_bos and self.bos_id is not None else ids

    def prompt_ids(self, prompt: str, chat: bool, system: str | None = None) -> list[int]:
        """The ids a prompt is fed as: wrapped in the chat template (with `system`) when `chat`, then encoded;
        a plain prompt starts with BOS when the tokenizer adds one (`add_bos`)."""
        if chat:
            return self.encode(self.render_chat(prompt, system=system))
        return self.encode(prompt, add_bos=self.add_bos)

    def decode(self, ids: list[int]) -> str:
        """The text of `ids`, special tokens included."""
        return self._tok.decode(list(ids), skip_special_tokens=False)

    def is_special(self, token_id: int) -> bool:
        return token_id in self.special_ids

    def to_json(self) -> str:
        """The tokenizer as `tokenizer.json` text (what a grammar library builds its token table from)."""
        return self._tok.to_str()

    # ---- display
    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes token `token_id` stands for; concatenating them gives the decoded text's bytes."""
        token_id = int(token_id)
        cached = self._bytes_cache.get(token_id)
        if cached is None:
            cached = self._bytes_cache[token_id] = self._token_bytes(token_id)
        return cached

    def _token_bytes(self, token_id: int) -> bytes:
        s = self._tok.id_to_token(token_id)
        if s is None:  # a model id the tokenizer has no piece for: no text, as transformers' decode skips it
            if token_id < 0:
                raise ValueError(f"token id {token_id} is outside the vocabulary ({self.vocab_size})")
            return b""
        if token_id in self.special_ids:
            return s.encode("utf-8")
        if self._byte_level:
            if all(c in CHAR_TO_BYTE for c in s):
                return bytes(CHAR_TO_BYTE[c] for c in s)
            return s.encode("utf-8")
        m = _BYTE_TOKEN.fullmatch(s)  # SentencePiece byte fallback
        if m:
            return bytes([int(m.group(1), 16)])
        return s.replace("▁", " ").encode("utf-8")

    def piece(self, token_id: int) -> str:
        """How a person should see the token: visible whitespace, bytes of partial characters as <0xNN>; an
        id the tokenizer has no piece for (a model whose embedding has more rows than the tokenizer has
        pieces, as Qwen2.5's) as `NO_PIECE` with its id."""
        token_id = int(token_id)
        cached = self._piece_cache.get(token_id)
        if cached is None:
            cached = self._piece_cache[token_id] = self._piece(token_id)
        return cached

    def _piece(self, token_id: int) -> str:
        if token_id in self.special_ids:
            return self._tok.id_to_token(int(token_id))
        if token_id >= self.vocab_size and self._tok.id_to_token(int(token_id)) is None:
            return NO_PIECE.format(int(token_id))
        return _display(self.token_bytes(token_id))

    def pieces(self, ids: list[int]) -> list[str]:
        return [self.piece(i) for i in ids]

    def decode_bytes(self, ids: list[int]) -> bytes:
        return b"".join(self.token_bytes(i) for i in ids)

    # ---- chat
    @property
    def has_chat_template(self) -> bool:
        return bool(self.chat_template)

    def render_chat(self, user_text: str, system: str | None = None, add_generation_prompt: bool = True) -> str:
        """The chat template applied to one user turn (plus `system` if given; else the template's default)."""
        if not self.chat_template:
            raise InputError("this model has no chat template; send raw text instead")
        messages = ([{"role": "system", "content": valid_text(system)}] if system is not None else [])
        messages.append({"role": "user", "content": valid_text(user_text)})
        return _compiled_template(self.chat_template).render(
            messages=messages, add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token, eos_token=self.eos_token,
        )


@lru_cache(maxsize=8)
def _compiled_template(source: str) -> Any:
    """Compile with the same settings transformers uses (sandboxed, trim_blocks, lstrip_blocks)."""
    from jinja2.exceptions import TemplateError
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        from datetime import datetime

        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)
