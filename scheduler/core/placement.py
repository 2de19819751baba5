"""R12 placement and R8 gang feasibility over per-node GPU counts.

Contract: a ``NodeIndex`` tracks one number per schedulable node (free GPUs, or free plus releasing ones) and
answers two questions fast, whatever the cluster size:

- ``slots(g)``: how many replicas of ``g`` GPUs fit, each on one node. Replicas of one job are all the same
  size, so a gang of ``k`` fits exactly when ``slots(g) >= k``, and best-fit placement never fails then
  (each placement lowers ``slots(g)`` by exactly one).
- ``best_fit(g)``: the fullest node that still fits ``g`` (R12), ties to the node that sorts first, so big
  replicas find whole nodes free.

Costs: ``slots`` is O(distinct values), ``best_fit`` O(distinct values + log n) amortised.
"""

from __future__ import annotations

import heapq
import re
from collections import defaultdict
from collections.abc import Callable
from functools import lru_cache
from itertools import islice


@lru_cache(maxsize=1 << 17)
def node_sort_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Natural order, so node-2 sorts before node-10 (cached: node names repeat from cycle to cycle)."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name) if part)


class NodeIndex:
    """Per-node values with a histogram (for ``slots``) and lazily cleaned buckets (for ``best_fit``)."""

    __slots__ = ("_buckets", "_hist", "_order", "_rank", "_slots", "by_group", "group_of", "memo", "value")

    def __init__(self, values: dict[str, int], rank: dict[str, int]) -> None:
        self.value: dict[str, int] = {}
        self._rank = rank
        self._hist: dict[int, int] = defaultdict(int)
        self._slots: dict[int, int] = {}  # slots(g) until the next change
        # answers of other modules' questions about these values (R17's per-domain fits), until the next change
        self.memo: dict[tuple[object, ...], int] = {}
        # answers about one group of nodes (an R17 domain), kept until one of the group's nodes changes; the
        # module asking sets ``group_of`` (node -> group) before it keeps any
        self.group_of: dict[str, str] = {}
        self.by_group: dict[str, dict[object, int]] = {}
        self._buckets: dict[int, list[tuple[int, str]]] = defaultdict(list)
        for name, v in values.items():
            self.value[name] = v
            self._hist[v] += 1
            self._buckets[v].append((rank[name], name))
        for bucket in self._buckets.values():
            heapq.heapify(bucket)
        self._order = sorted(values, key=rank.__getitem__)

    @property
    def nodes(self) -> list[str]:
        """Every node, in node order."""
        return self._order

    def set(self, name: str, v: int) -> None:
        old = self.value[name]
        if old == v:
            return
        self.value[name] = v
        self._slots.clear()
        if self.memo:
            self.memo.clear()
        if self.by_group:
            group = self.group_of.get(name)
            if group is not None:
                self.by_group.pop(group, None)
        self._hist[old] -= 1
        self._hist[v] += 1
        heapq.heappush(self._buckets[v], (self._rank[name], name))

    def slots(self, g: int) -> int:
        n = self._slots.get(g)
        if n is None:
            n = self._slots[g] = sum(count * (v // g) for v, count in self._hist.items() if v >= g and count)
        return n

    def total(self) -> int:
        return sum(v * count for v, count in self._hist.items())

    def best_fit(self, g: int) -> str | None:
        for v in sorted(k for k, count in self._hist.items() if k >= g and count):
            bucket = self._buckets[v]
            while bucket:
                _, name = bucket[0]
                if self.value[name] == v:
                    return name
                heapq.heappop(bucket)
        return None

    def most_available(self, count: int, keep: Callable[[str], bool], min_value: int = 0) -> list[str]:
        """Up to ``count`` nodes with at least ``min_value`` that ``keep`` accepts, largest value first, ties
        in node order."""
        out: list[str] = []
        for v in sorted((k for k, c in self._hist.items() if c and k >= min_value), reverse=True):
            if v == 0:  # usually most nodes: walk them in node order and stop early
                out.extend(
                    islice((n for n in self._order if self.value[n] == 0 and keep(n)), count - len(out))
                )
            else:
                valid = {name for _, name in self._buckets[v] if self.value[name] == v and keep(name)}
                out.extend(sorted(valid, key=self._rank.__getitem__)[: count - len(out)])
            if len(out) >= count:
                break
        return out
