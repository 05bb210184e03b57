"""Process memory settings: glibc hands large freed blocks back to the OS after `load_model`."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHILD = r"""
import torch
from inspector.engine.memory import release_large_frees
def rss_mb():
    return next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmRSS')) / 1024
assert release_large_frees() and release_large_frees()  # takes effect, idempotent
warm = torch.ones(6 << 18)  # freeing a 6 MB mapping makes glibc's default serve 5 MB from the heap
del warm
keep, big = [], []
for i in range(40):  # 5 MB buffers interleaved with small long-lived tensors, as a long prefill makes
    big.append(torch.ones(5 << 18))
    keep.append(torch.ones(64))
before = rss_mb()
big.clear()
print(before - rss_mb())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt is Linux-only")
def test_large_freed_buffers_leave_the_process():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True)
    assert float(out.stdout.strip()) > 150  # the 200 MB of freed buffers are returned, not kept in the heap
