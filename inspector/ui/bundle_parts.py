"""What travels beside the view bundle (`inspector.ui.bundle`), so that a long context does not make every update
big: `HoverFiles` and `PromptParts`, each used by the Renderer (`inspector.ui.render`) as it draws an update.

Big hover data travels beside the bundle (`HoverFiles`): an image heatmap's cell values (`data-z` of
`inspector.viz.heatimage`, float32) over `HOVER_INLINE_MAX` characters are written to a file Gradio serves,
and so are its row and column names (`data-rows`, `data-cols`: one name per key at a long context); the page
fetches both when the mouse first moves over that image (static/app.js). At 2,841 keys the attention
overview's values were 4.1 MB of the 4.8 MB bundle and its names about 100 KB of the 230 KB left, and every
byte of a bundle costs the page on every update (Gradio's HTML component compares its props as JSON text, the
page parses them), hovered or not.

A long prompt's token chips travel once (`PromptParts`): the chips of a prompt of `PART_MIN_ITEMS` tokens or
more go as a part of their own, named by its digest (view key `part:<digest>`), and the chips view holds a
marker in their place (`<!--ii-part:<digest>-->`); a later update whose prompt chips are the same sends the
marker alone, the part again at most every `PART_RESEND_S`. The page keeps the latest parts and puts a part back
in place of its marker before the view is shown; a chips view whose part has not arrived yet (updates answered
out of order) waits for it. At 2,840 prompt tokens the chips were 569 KB of each Step's 786 KB bundle.
"""

from __future__ import annotations

import atexit
import hashlib
import re
import secrets
import shutil
import tempfile
import threading
import time
from collections import OrderedDict, deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import gradio as gr

HOVER_INLINE_MAX = 65_536  # characters of base64 (48 KiB of float32, about 12,000 cells) kept inside the HTML
HOVER_KEEP = 2  # updates' files kept per (browser session, view): the one shown, the one before (a fetch on its way)
# an image heatmap's names (inspector.viz.heatimage.heat_html writes them right after its data-z, single-quoted)
NAMES = re.compile(r" data-rows='(?P<rows>[^']*)' data-cols='(?P<cols>[^']*)'")
HOVER_VIEWS_MAX = 128  # (browser session, view) pairs with files; the least recently drawn one's go first


class HoverFiles:
    """The float32 hover values of big image heatmaps, as files beside the bundle (see the module docstring).

    `carry(owner, views)` gives `views` with every HTML value's `data-z="<base64>"` over `HOVER_INLINE_MAX`
    characters replaced by `data-z-src="<page-relative URL>"` of a file holding that base64 text as it is: written
    once, never decoded here (decoding 5.3 MB of base64, about what 2,841 keys give, took 39 ms of the update on
    this machine); the page decodes a file, natively, on the first hover over it (static/app.js). The element's
    `data-rows` and `data-cols` go with it, as `data-names-src` of a file holding {"rows": [...], "cols": [...]}
    (their JSON as the HTML held it, unescaped). Files live in one
    temporary folder served by Gradio (`gr.set_static_paths`), under unguessable names, and are deleted when
    newer ones replace them (`HOVER_KEEP` per owner and view), when `HOVER_VIEWS_MAX` pairs are exceeded (a
    visitor gone), and at exit.

    The files are written and deleted by one writer thread, in the order asked (a file is written before it can
    be deleted), so an update does not wait for its file (4.1 MB at 2,841 keys: 7-12 ms of the Step here): the
    page asks for it on a hover, after the update has arrived, and asks again if it was not there yet
    (static/app.js). `flush()` waits until every write asked for so far is done."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: OrderedDict[tuple[Any, str], deque[list[Path]]] = OrderedDict()  # each update's files
        self._folder: Path | None = None
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="inspector-hover-files")

    def folder(self) -> Path:
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="inspector-hover-")).resolve()
            gr.set_static_paths([self._folder])  # adds to the served paths (plotly.js stays served)
            atexit.register(shutil.rmtree, self._folder, True)
        return self._folder

    def carry(self, owner: Any, views: dict[str, Any]) -> dict[str, Any]:
        out = dict(views)
        for key, value in views.items():
            if isinstance(value, str) and ' data-z="' in value:
                out[key] = self._carry_one(owner, key, value)
        return out

    def _carry_one(self, owner: Any, key: str, text: str) -> str:
        attr = ' data-z="'
        start = text.index(attr) + len(attr)
        end = text.index('"', start)
        if end - start <= HOVER_INLINE_MAX:
            return text
        names = NAMES.match(text, end + 1)  # the heatmap's data-rows / data-cols, right after its data-z
        with self._lock:
            path = self.folder() / f"{secrets.token_urlsafe(18)}.f32.b64"  # float32 little-endian, base64
            names_path = self.folder() / f"{secrets.token_urlsafe(18)}.names.json" if names else None
            gone: list[Path] = []
            kept = self._files.pop((owner, key), None) or deque()
            kept.append([path] + ([names_path] if names_path else []))
            while len(kept) > HOVER_KEEP:
                gone.extend(kept.popleft())
            self._files[(owner, key)] = kept
            while len(self._files) > HOVER_VIEWS_MAX:
                gone.extend(p for update in self._files.popitem(last=False)[1] for p in update)
            writes = [(path, text, start, end)]  # the values' base64 is cut out on the writer thread
            if names:  # the names' JSON, as json.dumps wrote it before the HTML escaped it
                named = '{"rows": %s, "cols": %s}' % (unescape(names["rows"]), unescape(names["cols"]))
                writes.append((names_path, named, 0, len(named)))
            # submitted under the lock: the writer takes writes and deletions in the order they were decided
            self._writer.submit(_write_then_delete, writes, gone)
        carried = text[:start - len(attr)] + f' data-z-src="gradio_api/file={path.as_posix()}"'
        if names:
            return carried + f' data-names-src="gradio_api/file={names_path.as_posix()}"' + text[names.end():]
        return carried + text[end + 1:]

    def flush(self) -> None:
        """Wait until every file asked for so far is written (and every older one deleted)."""
        self._writer.submit(lambda: None).result()


def unescape(text: str) -> str:
    """The text `html.escape(..., quote=True)` was given (it writes only these five entities): 0.7 ms for the 87 KB
    of 2,842 keys' names here, where `html.unescape`, which reads every entity HTML has, took 3.2 ms."""
    return (text.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"').replace("&#x27;", "'")
            .replace("&amp;", "&"))


def _write_then_delete(writes: list[tuple[Path, str, int, int]], gone: list[Path]) -> None:
    """The writer thread's one job: each (path, text, start, end) of an update, `text[start:end]` into `path`,
    then the files it replaced."""
    try:
        for path, text, start, end in writes:
            path.write_text(text[start:end], encoding="utf-8")
    finally:  # a failed write (the page asks again on its next hover) still lets the replaced files go
        for old in gone:
            old.unlink(missing_ok=True)


PART_MIN_ITEMS = 256  # prompt chips: a shorter prompt's chips go whole, in the chips view
PART_RESEND_S = 5.0  # the same part is sent again after this long (a page that missed it gets it back)
PART_OWNERS_MAX = 256  # browser sessions remembered; the least recently drawn is forgotten (its next part is sent)
PART_DIGESTS_MAX = 16  # parts whose digest is kept (a prompt's chips: about 200 bytes a token)


class PromptParts:
    """The token chips of a long prompt, sent once (see the module docstring). `join(owner, before, part, after,
    n_prompt)` gives the views to send for the chips view's value `before + part + after`, where `part` is the
    prompt's chips, built apart (`inspector.viz.tokens.token_chips_parts`; the digest of a part seen before is
    kept)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent: OrderedDict[Any, tuple[str, float]] = OrderedDict()  # owner -> (digest, when sent)
        self._digests: OrderedDict[str, str] = OrderedDict()  # part -> its digest, the latest PART_DIGESTS_MAX

    def join(self, owner: Any, before: str, part: str, after: str, n_prompt: int) -> dict[str, str]:
        if n_prompt < PART_MIN_ITEMS or not part:
            return {"chips": before + part + after}
        digest = self._digest(part)
        views = {"chips": f"{before}<!--ii-part:{digest}-->{after}"}
        now = time.monotonic()
        with self._lock:
            last = self._sent.pop(owner, None)
            if last is None or last[0] != digest or now - last[1] >= PART_RESEND_S:
                views[f"part:{digest}"] = part
                last = (digest, now)
            self._sent[owner] = last
            while len(self._sent) > PART_OWNERS_MAX:
                self._sent.popitem(last=False)
        return views

    def _digest(self, part: str) -> str:
        """The part's digest; a part met again (the same string object: its hash is kept) costs a lookup."""
        with self._lock:
            digest = self._digests.get(part)
            if digest is not None:
                self._digests.move_to_end(part)
                return digest
        digest = hashlib.blake2b(part.encode(), digest_size=12).hexdigest()
        with self._lock:
            self._digests[part] = digest
            while len(self._digests) > PART_DIGESTS_MAX:
                self._digests.popitem(last=False)
        return digest
