"""R5 and R8 when an admin drains or loses nodes: a job shrinks to the replicas it keeps elsewhere only when
those are at least ``min_replicas`` and include its master; otherwise it is evicted whole."""

from __future__ import annotations

import pytest

from scheduler.core.taken_nodes import TakenNodesRelease, on_taken_nodes


@pytest.mark.parametrize(
    ("min_replicas", "lost", "kept", "expected"),
    [
        (2, [3], [0, 1, 2], TakenNodesRelease(evict=False, indices=(3,))),  # workers lost, enough left
        (2, [3, 2], [0, 1], TakenNodesRelease(evict=False, indices=(2, 3))),  # exactly min_replicas left
        (3, [3, 2], [0, 1], TakenNodesRelease(evict=True, indices=(0, 1, 2, 3))),  # below min: R8
        (1, [0], [1, 2, 3], TakenNodesRelease(evict=True, indices=(0, 1, 2, 3))),  # the master: R5
        (4, [0, 1, 2, 3], [], TakenNodesRelease(evict=True, indices=(0, 1, 2, 3))),  # a rigid job
        (1, [1], [], TakenNodesRelease(evict=True, indices=(1,))),  # nothing kept (master already gone)
    ],
)
def test_a_job_shrinks_only_when_it_keeps_its_master_and_its_minimum(
    min_replicas: int, lost: list[int], kept: list[int], expected: TakenNodesRelease
) -> None:
    assert on_taken_nodes(min_replicas, lost, kept) == expected
