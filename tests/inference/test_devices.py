"""Device choices: names resolve or fail clearly, thread counts, the CPU's AMX check."""

from __future__ import annotations

import pytest
import torch

from sr.cpu import cpu_has_amx
from sr.inference.devices import DeviceError, configure_threads, pick_dtype, resolve_device


def test_cpu_names_resolve_and_unknown_names_fail_clearly():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(" CPU ") == torch.device("cpu")
    with pytest.raises(DeviceError, match="unknown device 'gpu0'; choose from auto, cpu, cuda, mps"):
        resolve_device("gpu0")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_cuda_without_a_gpu_is_a_clear_error():
    with pytest.raises(DeviceError, match="'cuda' is not available"):
        resolve_device("cuda")
    assert resolve_device("auto").type in ("cpu", "mps")


@pytest.mark.parametrize("device, bf16_supported, dtype", [
    ("cuda", True, torch.bfloat16),
    ("cuda", False, torch.float16),
    ("cuda:1", True, torch.bfloat16),
    ("mps", False, torch.float16),
    ("cpu", True, torch.float32),
])
def test_pick_dtype_is_bf16_on_cuda_where_supported_else_fp16_on_a_gpu_and_fp32_on_cpu(
        monkeypatch, device, bf16_supported, dtype):
    # The GPU default --precision auto keeps (sr.inference.precision decides the CPU's on its own);
    # the CUDA check is faked so that every branch runs on any machine.
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16_supported)
    assert pick_dtype(torch.device(device)) == dtype


def test_configure_threads_sets_torch_and_rejects_zero():
    before = torch.get_num_threads()
    try:
        assert configure_threads(1) == 1 and torch.get_num_threads() == 1
        with pytest.raises(ValueError, match="threads must be >= 1, got 0"):
            configure_threads(0)
    finally:
        torch.set_num_threads(before)


def test_amx_check_follows_torch_and_is_false_when_torch_cannot_tell(monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    assert cpu_has_amx() is True
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    assert cpu_has_amx() is False
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported", raising=False)
    assert cpu_has_amx() is False

    def broken() -> bool:
        raise RuntimeError("cpuinfo failed")

    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", broken, raising=False)
    assert cpu_has_amx() is False
