"""Reference elastic training script: DDP under ``torchrun``, checkpoint, stop on SIGTERM, resume.

Run it with an unchanged ``torchrun train_elastic.py``; Tide (or you) configures torchrun through its
``PET_*`` environment. The script needs nothing from Tide; it follows these rules, which are what make
an elastic job resizable without losing work:

* **Identity from torchrun.** ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``MASTER_PORT``
  come from the environment torchrun gives each worker. Backend: NCCL on GPU, gloo on CPU.
* **Checkpoints.** Every ``--ckpt-every`` steps, and when told to stop, rank 0 writes
  ``<dir>/checkpoint.pt`` atomically (temporary file, fsync, rename), so a reader sees the old or the
  new checkpoint, never half of one. ``<dir>`` is ``--ckpt-dir`` or ``$TIDE_CHECKPOINT_DIR``.
* **Progress.** After each checkpoint, rank 0 writes its Unix time to ``<dir>/tide-checkpointed-at``
  (atomically too). Tide reads it: among victims its rules leave equal, it preempts the job that would
  lose the fewest GPU-seconds of work since its last checkpoint. Every ``--log-every`` steps rank 0 also
  writes its speed to ``<dir>/tide-progress`` (``{"samples_per_second": ..., "steps_per_second": ...,
  "world_size": ...}``, atomically): Tide fits how the job scales from it and gives idle GPUs first to the
  jobs that make the most of them (goodput-aware growth).
* **Resume.** At start every rank loads the latest checkpoint if there is one: the model, the
  optimiser and the step count do not depend on the world size, so the job can resume at any size.
* **Stop on SIGTERM (or SIGINT).** The handler only sets a flag. After each step all ranks agree
  (one all-reduce that also averages the loss) on whether anyone was signalled, so they stop at
  the same step; rank 0 saves; then a rank that was signalled exits 0, and a rank that was not
  (a peer is leaving: torchrun's own scale-down) exits 75 so that its torchrun agent re-forms the
  group instead of taking the job as finished. No step is lost by a graceful stop.
* **Checkpoint on a preemption notice (SIGUSR1).** A project with a preemption notice gets SIGUSR1 some
  seconds before the SIGTERM of a reclaim or a preemption. The handler only counts it; the same per-step
  all-reduce tells every rank that someone got one, and rank 0 saves a checkpoint at that step boundary
  (reported as ``{"event": "checkpoint", "reason": "notice"}``), then training goes on until the SIGTERM.
* **Output.** Rank 0 prints one JSON line per logged step: ``{"step", "world_size", "loss", "time"}``
  (``step`` = optimiser steps completed, ``time`` = Unix seconds), and ``{"event": ...}`` lines
  (``start``, ``checkpoint``, ``stop``, ``done``) that carry no ``step`` key.

Exit codes: 0 when training finished or the rank was told to stop; 75 when a peer stopped; other
values are errors (torchrun counts those against ``--max-restarts``).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

PROGRESS_MARK = "tide-checkpointed-at"  # the time of the last complete checkpoint, read by Tide
SPEED_MARK = "tide-progress"  # the training speed (JSON), read by Tide for goodput-aware growth


def report_speed(directory: Path, steps: int, seconds: float, samples_per_step: int, world: int) -> None:
    """Write the speed of the last ``steps`` steps for Tide (a temporary file renamed over the mark)."""
    if steps <= 0 or seconds <= 0:
        return
    speed = {"samples_per_second": steps * samples_per_step / seconds, "steps_per_second": steps / seconds}
    tmp = directory / f"{SPEED_MARK}.tmp.{os.getpid()}"
    tmp.write_text(json.dumps({**speed, "world_size": world}) + "\n")
    os.replace(tmp, directory / SPEED_MARK)
EXIT_PEER_STOPPED = 75  # EX_TEMPFAIL: "run me again", as torchrun does for a failed worker group


class StopFlag:
    """Set by SIGTERM/SIGINT; ``notices`` counts SIGUSR1 (a preemption notice). The handlers only set a
    flag or a count: the step in flight finishes and the save happens in the main loop, never inside a
    handler (which could interrupt a half-written file)."""

    requested = False
    notices = 0

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)
        signal.signal(signal.SIGUSR1, self._notice)

    def _handle(self, signum: int, frame: object) -> None:
        self.requested = True

    def _notice(self, signum: int, frame: object) -> None:
        self.notices += 1


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200, help="total optimiser steps of the whole run")
    p.add_argument("--ckpt-every", type=int, default=10, help="checkpoint every N steps")
    p.add_argument("--ckpt-dir", default=os.environ.get("TIDE_CHECKPOINT_DIR", "./checkpoints"))
    p.add_argument("--step-time", type=float, default=0.0, help="extra seconds per step (simulated work)")
    p.add_argument("--log-every", type=int, default=1, help="print a JSON line every N steps")
    p.add_argument("--batch-size", type=int, default=64, help="samples per rank per step")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--no-speed-report", action="store_true", help="do not write the speed Tide's goodput-aware growth reads"
    )
    p.add_argument("--pg-timeout", type=float, default=60.0, help="seconds before a stuck collective fails")
    return p.parse_args()


def emit(record: dict[str, object]) -> None:
    print(json.dumps(record), flush=True)


def save_checkpoint(path: Path, step: int, model: nn.Module, opt: torch.optim.Optimizer) -> None:
    tmp = path.with_name(f"{path.name}.tmp.{os.getpid()}")
    with open(tmp, "wb") as f:
        torch.save({"step": step, "model": model.state_dict(), "optim": opt.state_dict()}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)  # atomic on POSIX: readers see the old file or the new one
    mark = path.with_name(PROGRESS_MARK)
    tmp = mark.with_name(f"{mark.name}.tmp.{os.getpid()}")
    tmp.write_text(f"{int(time.time() * 1000) / 1000:.3f}\n")  # in ms, never rounded past the checkpoint
    os.replace(tmp, mark)


def load_checkpoint(path: Path, model: nn.Module, opt: torch.optim.Optimizer, device: torch.device) -> int:
    """Load the latest checkpoint if there is one; return the step to resume from (0 when none)."""
    if not path.exists():
        return 0
    state = torch.load(path, map_location=device)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optim"])
    return int(state["step"])


def batch(step: int, rank: int, args: argparse.Namespace, device: torch.device) -> tuple[torch.Tensor, ...]:
    # Synthetic regression, y = sin(x . w) + noise; seeded by (seed, step, rank) so a resumed run
    # sees fresh data and the target never changes.
    target = torch.Generator().manual_seed(args.seed)
    w = torch.randn(16, 1, generator=target) / 4
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + step * 1009 + rank)
    x = torch.randn(args.batch_size, 16, generator=g)
    y = torch.sin(x @ w) + 0.01 * torch.randn(args.batch_size, 1, generator=g)
    return x.to(device), y.to(device)


def init_distributed(pg_timeout: float) -> tuple[int, int, int, torch.device, str]:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        share = os.environ.get("TIDE_GPU_FRACTION")  # a fractional job: keep to its share (gpu_share.py)
        if share:
            torch.cuda.set_per_process_memory_fraction(float(share), device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend, timeout=timedelta(seconds=pg_timeout))
    return rank, world, local_rank, device, backend


def main() -> int:
    args = parse_args()
    stop = StopFlag()
    stop.install()
    rank, world, local_rank, device, backend = init_distributed(args.pg_timeout)

    torch.manual_seed(args.seed)  # same initial weights on every rank (DDP also broadcasts them)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    ckpt_dir = Path(args.ckpt_dir)
    ckpt_path = ckpt_dir / "checkpoint.pt"
    step = load_checkpoint(ckpt_path, model, opt, device)
    if rank == 0:
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        emit({"event": "start", "resumed_from": step, "world_size": world, "time": time.time()})
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if backend == "nccl" else None)

    def checkpoint(reason: str) -> None:
        if rank == 0:
            save_checkpoint(ckpt_path, step, model, opt)
            emit({"event": "checkpoint", "saved_step": step, "reason": reason, "time": time.time()})

    seen_notices = 0
    timed_from, timed_step = time.perf_counter(), step  # the speed report's window (goodput-aware growth)
    while step < args.steps:
        x, y = batch(step, rank, args, device)
        loss = nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # DDP all-reduces the gradients here
        opt.step()
        if args.step_time:
            time.sleep(args.step_time)
        step += 1
        # One collective per step: the summed loss, how many ranks were asked to stop, and how many got a
        # preemption notice since the last step.
        signalled, notices = stop.requested, stop.notices
        agg = torch.tensor([loss.item(), float(signalled), float(notices > seen_notices)], device=device)
        seen_notices = notices
        dist.all_reduce(agg)
        stopping = agg[1].item() > 0
        if rank == 0 and (step % args.log_every == 0 or stopping or step == args.steps):
            emit({"step": step, "world_size": world, "loss": agg[0].item() / world, "time": time.time()})
            now = time.perf_counter()
            if not args.no_speed_report:
                report_speed(ckpt_dir, step - timed_step, now - timed_from, args.batch_size * world, world)
            timed_from, timed_step = now, step
        if stopping:
            checkpoint("stop")
            dist.barrier()  # nobody exits (and tears the group down) before the file is in place
            if rank == 0:
                emit({"event": "stop", "signalled_ranks": int(agg[1].item()), "time": time.time()})
            dist.destroy_process_group()
            # Read the flag again: a signal that came after this step's agreement still means "stop".
            return 0 if stop.requested else EXIT_PEER_STOPPED
        if agg[2].item() > 0:
            checkpoint("notice")  # the SIGTERM follows the notice: the work so far is kept now
        elif step % args.ckpt_every == 0:
            checkpoint("interval")

    if step % args.ckpt_every:
        checkpoint("done")
    if rank == 0:
        emit({"event": "done", "time": time.time()})
    dist.barrier()
    dist.destroy_process_group()
    return 0


def exit_without_teardown(code: int) -> None:
    """Exit as the interpreter would, minus its teardown: ``atexit`` handlers run, output is flushed.

    Under plain torchrun a gloo rank occasionally aborted in the interpreter's teardown, after ``main``
    had returned ("terminate called without an active exception", SIGABRT: a C++ thread of torch's still
    joinable when destroyed; 2 of 71 three-rank runs on a loaded 2-core machine), and its agent
    then reported the finished job as failed. Everything this script promises (checkpoint, log lines)
    is durable by then, so the teardown is skipped, as Tide's warm launcher does for every worker."""
    try:
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    exit_without_teardown(main())
