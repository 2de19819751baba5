"""``deploy/examples/gpu_share.py``: a fractional job's process applies TIDE_GPU_FRACTION to its framework."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "examples" / "gpu_share.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_share", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_whole_gpu_jobs_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIDE_GPU_FRACTION", raising=False)
    assert _load().cap_gpu_memory() is None


def test_the_share_caps_torch_on_the_visible_device(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[float, int]] = []
    cuda = SimpleNamespace(
        is_available=lambda: True,
        device_count=lambda: 1,
        set_per_process_memory_fraction=lambda share, device: calls.append((share, device)),
    )
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=cuda))
    monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
    monkeypatch.setenv("TIDE_GPU_FRACTION", "0.5")
    assert _load().cap_gpu_memory() == 0.5
    assert calls == [(0.5, 0)]
    assert os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.500"


def test_a_share_that_is_not_one_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        _load().cap_gpu_memory({"TIDE_GPU_FRACTION": "1.5"})
