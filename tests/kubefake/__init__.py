"""A fake Kubernetes API server for tests: a real HTTP server speaking the core/v1 REST protocol.

It is a fake, not Kubernetes: see ``server.py`` for what it serves and what it does not, ``kubelet.py``
for the simulated kubelets. Tests drive it with the real ``kubernetes`` client.
"""

from kubefake.server import FakeKubeApi, Fault, Request
from kubefake.store import ApiError

__all__ = ["ApiError", "FakeKubeApi", "Fault", "Request"]
