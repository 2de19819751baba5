"""The process kubelet's runtime: each admitted pod's container really runs, as a local process group.

Contract: ``ProcessRuntime(options)`` starts, watches and stops the processes of the pods the kubelets
admit (``kubelet.py`` uses it when the server is built with ``FakeKubeApi(processes=ProcessOptions(...))``).
``start(pod, world)`` resolves the container (``containers.py``: ``ContainerConfigError`` while it cannot
be created) and starts it with ``Popen(start_new_session=True)``, stdout and stderr to
``work_dir/logs/NS.NAME.UID.log``, the pod's log (``log_text``); a program that cannot be executed raises
``OSError``. ``exit_code(pod)`` is None while the process runs, else its exit code (128+N when signal N
ended it); once the main process is gone the rest of the container is killed, as a container's
processes are when its PID 1 exits: its process group, and every process that inherited its marker
(``KUBEFAKE_CONTAINER=<pod uid>`` in the environment: a real container's cgroup holds them all, also a
child that started a session of its own). ``stopping(pod, elapsed, grace)`` sends SIGTERM to the group at once (a
real runtime signals PID 1 only; torchrun forwards it to its workers anyway) and SIGKILL once ``grace``
seconds ran out, and returns the exit code once the process exited. ``reap(live)``
kills the processes whose pod is gone or done; ``kill_all()`` (``FakeKubeApi.stop``, and at interpreter
exit as a last resort) kills every group still running and reaps it. Every wait is bounded.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from kubefake.containers import ContainerConfigError, ProcessOptions, World, container_launch, pod_dir
from kubefake.store import Obj, now_rfc3339

PodKey = tuple[str, str, str]
CONTAINER_MARK = "KUBEFAKE_CONTAINER"  # in every process of a container: ending it ends them all
REAP_SECONDS = 5.0

__all__ = ["ContainerConfigError", "ProcessOptions", "ProcessRuntime", "World", "waiting_status"]


def pod_key(pod: Obj) -> PodKey:
    meta = pod["metadata"]
    return meta["namespace"], meta["name"], meta["uid"]


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def _kill_container(marker: bytes) -> None:
    """SIGKILL every process that carries the container's marker, as the end of a container kills every
    process in its cgroup: also those that left its process group (a new session of their own)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                os.kill(int(proc.name), signal.SIGKILL)


@dataclass
class _Process:
    popen: subprocess.Popen[bytes]
    marker: bytes = b""
    terminated: bool = False
    killed: bool = False
    code: int | None = None

    def poll(self) -> int | None:
        """The exit code once the main process exited, its group killed and the process reaped."""
        if self.code is not None:
            return self.code
        # WNOWAIT leaves the exited process a zombie: its pid, the group's id, cannot be reused
        # before the group is killed below.
        flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
        try:
            if os.waitid(os.P_PID, self.popen.pid, flags) is None:
                return None
        except ChildProcessError:
            return self._reaped()  # reaped already: its group id may be another's now, so no signal
        _signal_group(self.popen.pid, signal.SIGKILL)
        _kill_container(self.marker)
        return self._reaped()

    def kill(self) -> None:
        if self.code is None:
            _signal_group(self.popen.pid, signal.SIGKILL)
            self._reaped()
        _kill_container(self.marker)

    def _reaped(self) -> int | None:
        try:
            returncode = self.popen.wait(timeout=REAP_SECONDS)
        except subprocess.TimeoutExpired:
            return None  # not dead yet (uninterruptible sleep): the next poll tries again
        self.code = 128 - returncode if returncode < 0 else returncode
        return self.code


class ProcessRuntime:
    """The processes of the fake's pods, by pod (namespace, name, uid)."""

    def __init__(self, options: ProcessOptions) -> None:
        self.options = options
        self.logs: dict[tuple[str, str], Path] = {}
        self._processes: dict[PodKey, _Process] = {}
        self._lock = threading.Lock()
        atexit.register(self.kill_all)

    def start(self, pod: Obj, world: World) -> None:
        launch = container_launch(pod, world, self.options)
        key = pod_key(pod)
        log = self.options.work_dir / "logs" / f"{key[0]}.{key[1]}.{key[2][:8]}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        pod_dir(self.options, pod).mkdir(parents=True, exist_ok=True)
        # append mode: a container's processes share its output as a pipe would, none overwrites another's lines
        with self._lock, log.open("ab") as out:
            self.logs[key[:2]] = log
            marker = f"{CONTAINER_MARK}={key[2]}"
            popen = subprocess.Popen(
                launch.argv,
                env={**launch.env, CONTAINER_MARK: key[2]},
                cwd=launch.cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: signals reach its children too
            )
            self._processes[key] = _Process(popen, marker.encode())

    def knows(self, pod: Obj) -> bool:
        with self._lock:
            return pod_key(pod) in self._processes

    def exit_code(self, pod: Obj) -> int | None:
        with self._lock:
            process = self._processes.get(pod_key(pod))
            return None if process is None else process.poll()

    def stopping(self, pod: Obj, elapsed: float, grace: float) -> int | None:
        with self._lock:
            process = self._processes[pod_key(pod)]
            code = process.poll()
            if code is not None:
                return code
            if not process.terminated:
                process.terminated = True
                _signal_group(process.popen.pid, signal.SIGTERM)
            if elapsed >= grace and not process.killed:
                process.killed = True
                _signal_group(process.popen.pid, signal.SIGKILL)
            return None

    def reap(self, live: set[PodKey]) -> None:
        """Kill the processes of pods that are gone (deleted at once, replaced) or done (``finish``)."""
        with self._lock:
            for key in [k for k in self._processes if k not in live]:
                self._processes[key].kill()
                if self._processes[key].code is not None:
                    del self._processes[key]

    def kill_all(self) -> None:
        with self._lock:
            for process in self._processes.values():
                process.kill()
            self._processes.clear()
        atexit.unregister(self.kill_all)

    def log_text(self, ns: str, name: str) -> str | None:
        with self._lock:
            path = self.logs.get((ns, name))
        if path is None or not path.is_file():
            return None
        return path.read_bytes().decode("utf-8", errors="replace")


def waiting_status(pod: Obj, reason: str, message: str) -> Obj | None:
    """The Pending pod's status while its container cannot be created; None when it says so already."""
    waiting = {"reason": reason, "message": message}
    statuses = pod["status"].get("containerStatuses") or []
    if statuses and all(s["state"].get("waiting") == waiting for s in statuses):
        return None  # unchanged: no MODIFIED event every 10 ms
    now = now_rfc3339()
    return {
        "phase": "Pending",
        "hostIP": "127.0.0.1",
        "startTime": pod["status"].get("startTime", now),
        "conditions": [
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": now}
        ],
        "containerStatuses": [
            {
                "name": c["name"],
                "image": c["image"],
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "started": False,
                "state": {"waiting": waiting},
            }
            for c in pod["spec"]["containers"]
        ],
    }
