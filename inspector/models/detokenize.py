"""Incremental detokenization: turn a growing list of token ids into text, one token at a time.

Byte-level BPE tokens are byte strings, and one character (an emoji, a CJK ideograph, an accented
letter) can span several tokens. `Detokenizer.add(id)` appends the token's bytes and returns only the
newly *complete* UTF-8 characters; an unfinished sequence waits for the next token. Special tokens
(`<|im_end|>`, ...) add no text. `finish()` flushes what is left (invalid bytes become U+FFFD, as the
full decode does). Concatenating every returned piece equals `tokenizer.decode(ids)` without specials.
"""

from __future__ import annotations

import codecs


class Detokenizer:
    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.text = ""

    def add(self, token_id: int) -> str:
        """Append one token; return the text it completed ("" while a character is still partial)."""
        if self.tokenizer.is_special(token_id):
            return ""
        new = self._decoder.decode(self.tokenizer.token_bytes(token_id))
        self.text += new
        return new

    def finish(self) -> str:
        """Flush bytes of an unfinished character (as U+FFFD); return that text."""
        new = self._decoder.decode(b"", final=True)
        self.text += new
        return new

    @property
    def pending(self) -> bool:
        """True while some bytes wait for the rest of their character."""
        return bool(self._decoder.getstate()[0])


def detokenize(tokenizer, ids: list[int]) -> str:
    """Full text of `ids` through the incremental path (what the session shows after a rebuild)."""
    d = Detokenizer(tokenizer)
    for i in ids:
        d.add(i)
    d.finish()
    return d.text
