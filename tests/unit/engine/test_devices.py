"""`--device cpu|cuda|mps`: a device that is not present is one line naming what is; on a GPU (when the
machine has one) the same greedy tokens as the CPU, and the views' records come back on the CPU."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from inspector.engine.config import SamplingParams
from inspector.engine.devices import available_devices, resolve_device
from inspector.errors import InputError

GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine (torch.cuda.is_available() is False)")


def test_cpu_is_always_there_and_bad_names_are_one_line():
    assert resolve_device(None) == resolve_device("cpu") == torch.device("cpu") and available_devices()[0] == "cpu"
    with pytest.raises(InputError, match=r"device must be one of cpu, cuda, mps \(or cuda:N\), got 'tpu'"):
        resolve_device("tpu")
    with pytest.raises(InputError, match="device must be one of"):
        resolve_device("cpu:1")
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match=r"device cuda is not present on this machine \(available: cpu"):
            resolve_device("cuda")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU: nothing to refuse")
def test_cli_refuses_an_absent_device_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "inspector.commands.cli", "run", "--prompt", "hi",
                           "--model", str(tmp_path), "--device", "cuda"], capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    assert "device cuda is not present on this machine (available: cpu" in proc.stderr


@GPU
@pytest.mark.parametrize("model_type", ["llama", "gemma3_text"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_session_on_the_gpu_equals_the_cpu_and_its_records_are_on_the_cpu(tmp_path, model_type, dtype):
    from inspector.models.loader import load_model
    from inspector.session.session import Session
    from tests.support.tiny import make_tiny_checkpoint

    directory = make_tiny_checkpoint(tmp_path / model_type, model_type=model_type,
                                     **({"sliding_window": 6} if model_type != "llama" else {}))
    runs = {}
    for device in ("cpu", "cuda"):
        loaded = load_model(str(directory), dtype=dtype, device=device)
        assert loaded.device.startswith(device) and next(loaded.model.parameters()).device.type == device
        s = Session(loaded)
        s.prefill("The quick brown fox jumps over the lazy dog. Hello world!", SamplingParams(), max_new_tokens=12)
        for _ in range(6):
            s.step(SamplingParams())
        assert isinstance(s.attention_pattern(0, 0, 0), np.ndarray) and isinstance(s.attention_row(2, 1, 1), np.ndarray)
        runs[device] = s.generated_ids
    if dtype == torch.float32:
        assert runs["cpu"] == runs["cuda"]
