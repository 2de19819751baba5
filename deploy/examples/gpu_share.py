"""Keep a fractional Tide job inside its share of the GPU: standard library only, copy it into your script.

Tide runs a job submitted with ``--gpu-fraction 0.5`` on a GPU that other fractional jobs of its project use
too. The replica sees that one GPU (``CUDA_VISIBLE_DEVICES``, set by the local executor on a machine with
real GPUs; the device plugin on Kubernetes) and gets its share in ``TIDE_GPU_FRACTION``. Nothing in the
driver stops it from allocating more: the cap holds by **cooperation, not isolation**. Call
``cap_gpu_memory()`` first thing, before any framework allocates GPU memory:

* PyTorch: ``torch.cuda.set_per_process_memory_fraction(share, device)`` on the visible device; an
  allocation past the cap raises ``torch.cuda.OutOfMemoryError`` in this process only;
* JAX: ``XLA_PYTHON_CLIENT_MEM_FRACTION`` (read when JAX starts: call this before ``import jax``).

A process that skips this, or allocates outside the framework's allocator (another library's own CUDA
context, cuDNN workspaces), can still take more than its share and push a neighbour out of memory.
Enforced caps need a driver-level mechanism (NVIDIA MPS with ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``, MIG,
or KAI-Scheduler's ``kai-gpu-fractioning``), which Tide does not set up.

Usage (a notebook or a training script)::

    from gpu_share import cap_gpu_memory   # or paste the function
    share = cap_gpu_memory()               # None when the job has whole GPUs
"""

from __future__ import annotations

import importlib
import os
import sys


def cap_gpu_memory(environ: dict[str, str] | None = None) -> float | None:
    """Apply ``TIDE_GPU_FRACTION`` to the frameworks this process uses; the share, or None without one."""
    env = os.environ if environ is None else environ
    text = env.get("TIDE_GPU_FRACTION")
    if not text:
        return None
    share = float(text)
    if not 0 < share < 1:
        raise ValueError(f"TIDE_GPU_FRACTION={text!r}: expected a share of one GPU between 0 and 1")
    # JAX reads its share when it starts; harmless for a process that never imports it
    os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", f"{share:.3f}")
    if "torch" in sys.modules or importlib.util.find_spec("torch") is not None:
        torch = importlib.import_module("torch")
        if torch.cuda.is_available():
            for device in range(torch.cuda.device_count()):  # one visible device under Tide
                torch.cuda.set_per_process_memory_fraction(share, device)
    return share


if __name__ == "__main__":
    print(f"TIDE_GPU_FRACTION applied: {cap_gpu_memory()}")
