"""What a launch is: generation G of a job at a fixed size N, with ranked members, an endpoint and a run id.

Contract (pure, standard library only). A torchrun job under Tide runs as a series of launches: each is a
fresh rendezvous of exactly ``size`` replicas, ranked 0..N-1; rank (or index) 0 is the master, which hosts
the rendezvous store on the launch's port. ``role_of(index)`` is the one place that says so (pod labels,
``TIDE_REPLICA_ROLE``, ``is_host`` of the rendezvous). ``run_id_for(project, job, generation)`` names a
launch's rendezvous: one per generation, so a new launch never joins the state of an earlier one, and safe
inside torchrun's ``--rdzv-conf``. ``Launch`` holds one launch as a whole: the service builds it from the rows (``scheduler.elastic.inplace.launch``) to
answer a pod agent's poll with its size, rank and run id.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

MASTER_INDEX = 0


class Role(StrEnum):
    MASTER = "master"
    WORKER = "worker"


def role_of(index: int) -> Role:
    """The master is index (or rank) 0; every other replica is a worker."""
    return Role.MASTER if index == MASTER_INDEX else Role.WORKER


def run_id_for(project: str, job: str, generation: int) -> str:
    """A rendezvous id unique per launch of a job: reusing one would join the previous launch's state."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{project}.{job}")
    return f"{safe}.g{generation}"


def endpoint(host: str, port: int) -> str:
    """``host:port`` as torchrun parses it: an IPv6 literal gets brackets."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


@dataclass(frozen=True, slots=True)
class Launch:
    """Generation ``generation`` of ``project/job``: its ``members`` are the replica ids in rank order (rank 0
    the master, which hosts the rendezvous), so its size is their number."""

    project: str
    job: str
    generation: int
    members: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.members:
            raise ValueError("a launch has at least one member")

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def run_id(self) -> str:
        return run_id_for(self.project, self.job, self.generation)

    @property
    def master(self) -> int:
        return self.members[MASTER_INDEX]

    def rank_of(self, replica_id: int) -> int:
        """The member's rank (``ValueError`` for a replica that is no member)."""
        return self.members.index(replica_id)
