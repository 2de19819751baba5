"""A fake Kubernetes API server for tests: a real HTTP server speaking the core/v1 REST protocol
(and ``coordination.k8s.io/v1`` Leases, ``leases.py``, for leader election).

It is a fake, not Kubernetes: see ``server.py`` for what it serves and what it does not, ``kubelet.py``
for the simulated kubelets. Tests drive it with the real ``kubernetes`` client. With
``FakeKubeApi(processes=ProcessOptions(work_dir=..., base_env={...}))`` (off by default) the kubelets
run each admitted pod's container as a real local process instead of simulating it: ``processes.py``
for the life cycle (real signals on deletion, the real exit code), ``containers.py`` for how the
container's env, argv, Service host names (127.0.0.1) and volume mounts (directories under
``work_dir``, a path rewrite, not a chroot) are mapped onto this machine.
"""

from kubefake.containers import ProcessOptions
from kubefake.faults import Fault, Request
from kubefake.server import FakeKubeApi
from kubefake.store import ApiError

__all__ = ["ApiError", "FakeKubeApi", "Fault", "ProcessOptions", "Request"]
