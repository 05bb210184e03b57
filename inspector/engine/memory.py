"""Process memory: hand large freed blocks back to the operating system (glibc Linux; a no-op elsewhere).

`drop_resident_pages(t)` tells the kernel the process is done with the pages inside a tensor it will
never read again (`load_model` calls it on each memory-mapped weight once its laid-out copy is made, so
the file's pages and the copies are not resident together).

glibc's malloc raises its mmap threshold after each large free, up to 32 MB, so later large buffers
(a long prompt's per-layer activations, attention blocks, MLP intermediates) come from the heap, where
small long-lived allocations made between them (trace summaries, records) pin the freed space, and RSS
grows far past what a session holds. With the threshold fixed at 4 MB, large buffers get their own
mappings and go back to the system when freed (`bench/engine.py`'s memory table measures the effect).
`load_model` calls `release_large_frees()` once.

`huge_page_buffer(numel, dtype)` is the memory the weight matrices are laid out in
(`inspector.engine.linear.lay_out_weights`): the kernel is asked to back it with transparent huge pages
(2 MiB), since a decode step streams every weight once, and with 4 KiB pages it walks the page table
once per 4 KiB read.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import mmap
import sys

import torch

M_MMAP_THRESHOLD = -3  # mallopt parameter (malloc.h)
# Allocations of 4 MB or more get their own mapping, unmapped on free. A lower threshold would also map
# the medium buffers of every prefill, paying page faults on each.
MMAP_THRESHOLD_BYTES = 4 << 20

_done = False


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library, opened once (find_library runs a subprocess: ~2 ms a call); None when unavailable."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def release_large_frees() -> bool:
    """Fix glibc's mmap threshold at MMAP_THRESHOLD_BYTES (idempotent). True when it took effect."""
    global _done
    if _done:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        _done = bool(_libc().mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    except AttributeError:  # no libc, or musl or another libc without mallopt
        return False
    return _done


MADV_DONTNEED = 4  # sys/mman.h (Linux)
MADV_HUGEPAGE = 14
PAGE = mmap.PAGESIZE  # madvise works in whole pages of the system's size
HUGE_PAGE = 2 << 20  # a transparent huge page on x86-64 (and arm64 with 4 KiB base pages)


def _advise(first: int, nbytes: int, page: int, advice: int) -> None:
    """madvise(advice) the whole `page`-aligned pages inside the bytes [first, first + nbytes), never the
    bytes around them. No-op off Linux, when no whole page lies inside, or on failure."""
    start = -(-first // page) * page  # the first whole page inside
    end = (first + nbytes) // page * page
    if not sys.platform.startswith("linux") or end <= start:
        return
    try:
        _libc().madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), advice)
    except AttributeError:  # no libc, or one without madvise
        return


def drop_resident_pages(t: torch.Tensor) -> None:
    """madvise(DONTNEED) the whole pages inside contiguous `t`'s own bytes (never a neighbour's: tensors
    of one file may share a storage): file-backed pages leave this process's RSS (read again from the
    file if touched); anonymous ones would read back as zeros, so the caller must never read `t` again.
    No-op off Linux, for a non-contiguous or non-CPU tensor, or on failure."""
    if t.device.type == "cpu" and t.is_contiguous():
        _advise(t.data_ptr(), t.numel() * t.element_size(), PAGE, MADV_DONTNEED)


def huge_page_buffer(numel: int, dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised 1-D CPU tensor of `numel` elements (exactly: its storage holds no padding, so what
    counts storage bytes counts the values) whose whole 2 MiB pages the kernel is asked to back with
    transparent huge pages (madvise HUGEPAGE before anything is written; the kernel may still use small
    pages, and the part before the first and after the last 2 MiB boundary stays in small ones). Off Linux,
    without libc, or when the kernel refuses: small pages. Only the page size can differ."""
    buffer = torch.empty(numel, dtype=dtype)
    _advise(buffer.data_ptr(), numel * buffer.element_size(), HUGE_PAGE, MADV_HUGEPAGE)
    return buffer
