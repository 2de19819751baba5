"""What a job loses when an admin takes nodes away (drains them, or declares them lost): R5 and R8.

Contract: ``on_taken_nodes(min_replicas, lost, kept)`` is pure. ``lost`` are the indices of the job's wanted
replicas on the taken nodes, ``kept`` those elsewhere. The job shrinks to ``kept`` (releasing only ``lost``)
when that leaves it at least ``min_replicas`` replicas and its master (index 0, the rendezvous host, which
goes only when the whole job goes: R5); otherwise it is evicted whole (R8: no gang runs below its
minimum), every wanted replica released. The replicas named are in ascending index order.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

MASTER = 0


@dataclass(frozen=True, slots=True)
class TakenNodesRelease:
    """``evict``: the whole job goes back to pending; ``indices``: the replicas released."""

    evict: bool
    indices: tuple[int, ...]


def on_taken_nodes(min_replicas: int, lost: Collection[int], kept: Collection[int]) -> TakenNodesRelease:
    """Shrink to ``kept`` where R5 and R8 allow it, else evict the whole job."""
    evict = len(kept) < min_replicas or MASTER in lost
    return TakenNodesRelease(evict, tuple(sorted([*lost, *kept] if evict else lost)))
