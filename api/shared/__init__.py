"""Pure code that both the server (``api.server``) and the client (``api.client``) use, or may use.

Contract: light to import (the standard library, PyYAML for manifests); nothing here imports the server,
the client or the scheduler, so either side may import it without pulling in the other. ``paths`` (where
Tide keeps its files, the API prefix) and ``version`` are read by ``tide serve`` and by every ``tide``
command, the CLI's quick path included; ``replica_sizes`` expands allowed replica counts for the schemas
and for ``tide run``; ``manifest`` and ``pytorchjob`` read Kubeflow manifests without a web framework, as a
client could before it posts one.
"""
