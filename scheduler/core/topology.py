"""R17 topology domains: gangs placed inside one domain (a rack, an NVLink domain) where they can be.

Contract: nodes may carry a ``domain`` (on Kubernetes the value of the node label named by
``--topology-key``; locally from ``--nodes``). When none does, or ``Config.topology`` is off, nothing here
changes a plan. Otherwise:

- a start places the whole gang inside the one domain where it fits with the fewest GPUs to spare (R12's
  best fit, one level up), ties to the domain that sorts first; with no such domain a ``preferred`` job
  starts across domains as before, a ``required`` one waits; a ``required`` job that starts below its
  maximum on idle GPUs starts in the domain where it fits at its maximum, if one has room for that (it can
  grow only in its own domain: on the fullest one it would grow by preempting, or wait for GPUs to be
  released, while another had room for all of it);
- growth goes to the domain of the job's master first; a ``required`` job grows only there;
- ``slots(job, index, count)`` is how many of the job's replicas fit, counting only what the job may use
  (a ``required`` job: one domain), so the passes that ask "does it fit" (start, reclaim, preemption, grow)
  stay honest for it. Reclaim for a ``required`` job takes victims until it fits in one domain, and R6's
  fill-back gives back those in other domains; where victims taken in R5 order across domains leave none
  with room (the victims' floor stops the one that would complete a domain), it tries one domain at a
  time, taking only victims there, and keeps the domain that costs least (``preemption.reclaim``);
  consolidation, drains and node-targeted reclaim are not tried for it (they reason about nodes, not
  domains).

Pure; the ledger holds one ``Domains`` per cycle.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.core.model import Job, Node
from scheduler.core.placement import NodeIndex

PREFERRED = "preferred"
REQUIRED = "required"


@dataclass(slots=True)
class Domains:
    """Schedulable nodes by domain, in node order; ``of`` maps a node to its domain."""

    of: dict[str, str]
    members: dict[str, list[str]]
    names: list[str]  # the domains, sorted

    @classmethod
    def build(cls, nodes: list[Node], order: list[str], *, on: bool) -> Domains:
        named = {n.name: n.domain for n in nodes if n.domain} if on else {}
        members: dict[str, list[str]] = {}
        for name in order:
            if name in named:
                members.setdefault(named[name], []).append(name)
        return cls({n: d for d, names in members.items() for n in names}, members, sorted(members))

    def required(self, job: Job) -> bool:
        """Whether the job must stay inside one domain (and domains exist)."""
        return bool(self.members) and job.topology == REQUIRED

    def _known(self, domain: str, index: NodeIndex) -> dict[object, int]:
        """What ``index`` keeps about ``domain`` until one of its nodes changes."""
        known = index.by_group.get(domain)
        if known is None:
            if index.group_of is not self.of:
                index.group_of = self.of
                index.by_group.clear()
            known = index.by_group[domain] = {}
        return known

    def _fit(self, domain: str, index: NodeIndex, g: int) -> int:
        known = self._known(domain, index)
        n = known.get(g)
        if n is None:
            value = index.value
            n = known[g] = sum(value[m] // g for m in self.members[domain])
        return n

    def _spare(self, domain: str, index: NodeIndex) -> int:
        known = self._known(domain, index)
        n = known.get("spare")
        if n is None:
            value = index.value
            n = known["spare"] = sum(value[m] for m in self.members[domain])
        return n

    def fit(self, domain: str, index: NodeIndex, g: int) -> int:
        """Replicas of ``g`` GPUs that fit on ``index`` inside ``domain`` (kept by ``index`` until it changes)."""
        return self._fit(domain, index, g)

    def spare(self, domain: str, index: NodeIndex) -> int:
        """GPUs ``index`` has inside ``domain`` (kept the same way)."""
        return self._spare(domain, index)

    def slots(self, job: Job, index: NodeIndex, home: str | None) -> int:
        """Replicas of a job that requires one domain that fit on ``index``: in its ``home`` domain when it
        runs (its master's), else in the roomiest domain (both kept by ``index`` until it changes)."""
        g = job.gpus_per_replica
        if home is not None:
            return self._fit(home, index, g)
        key = ("roomiest", g)
        n = index.memo.get(key)
        if n is None:
            n = index.memo[key] = max(self._fit(d, index, g) for d in self.members)
        return n

    def target(
        self, job: Job, index: NodeIndex, count: int, home: str | None, *, starts: bool = False
    ) -> str | None:
        """Where ``count`` more replicas go (domains exist): the home domain of a running job, else the domain
        where they fit with the fewest GPUs to spare (ties to the first name); ``None``: none (anywhere).
        ``starts``: they start now on idle GPUs (``index``); a job that starts below its maximum and requires
        one domain, which it can then grow in only, starts where it fits at its maximum if a domain has
        room for that (decision 72)."""
        if home is not None:
            return home
        g = job.gpus_per_replica
        if starts and count < job.max_replicas and self.required(job):
            roomy = self._best_fit(index, g, job.max_replicas)
            if roomy is not None:
                return roomy
        return self._best_fit(index, g, count)

    def _best_fit(self, index: NodeIndex, g: int, count: int) -> str | None:
        """The domain where ``count`` replicas of ``g`` GPUs fit with the fewest GPUs to spare."""
        best: tuple[int, str] | None = None
        for d in self.names:
            if self._fit(d, index, g) >= count:
                spare = self._spare(d, index)
                if best is None or spare < best[0]:
                    best = (spare, d)
        return None if best is None else best[1]

    def best_fit(self, domain: str, index: NodeIndex, g: int) -> str | None:
        """The fullest node of ``domain`` that still fits ``g`` GPUs (ties in node order)."""
        best: tuple[int, str] | None = None
        for n in self.members[domain]:
            v = index.value[n]
            if v >= g and (best is None or v < best[0]):
                best = (v, n)
        return None if best is None else best[1]
