"""Builders for core scenarios: a cluster you submit jobs to and step cycle by cycle.

``Cluster`` plays a perfect executor: it applies each plan at once (or keeps released replicas as
``releasing`` until ``release_done()`` when ``slow_release`` is set) and checks every invariant after every
cycle, so each scenario also proves R1-R13's invariants hold along the way.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace

from scheduler.core import ClusterState, Config, Department, Job, Node, Plan, Project, apply_plan, plan_cycle
from scheduler.core.cycle import finish_releases
from scheduler.core.invariants import check_invariants
from scheduler.core.usage import accrue, over_quota


def nodes(count: int, gpus: int = 1, prefix: str = "node") -> tuple[Node, ...]:
    return tuple(Node(f"{prefix}-{i}", gpus) for i in range(1, count + 1))


class Cluster:
    def __init__(
        self,
        node_list: tuple[Node, ...],
        projects: list[Project] | None = None,
        departments: tuple[Department, ...] = (),
        config: Config | None = None,
        *,
        slow_release: bool = False,
    ) -> None:
        self.state = ClusterState(node_list, tuple(projects or ()), (), departments)
        self.config = config or Config(settle_seconds=0)
        self.now = 0.0
        self.slow_release = slow_release
        self.plans: list[Plan] = []
        self.states: list[ClusterState] = []  # the state each plan was made from
        # R16: the allowed sizes each submitted job gets, by (name, min, max); none when unset
        self.sizes_for: Callable[[str, int, int], tuple[int, ...]] | None = None
        # R17: the topology each submitted job gets, by name; "preferred" when unset
        self.topology_for: Callable[[str], str] | None = None

    def __repr__(self) -> str:
        return f"Cluster(now={self.now}, config={self.config}, slow_release={self.slow_release}, state={self.state})"

    def project(self, name: str, deserved: int, **kw: object) -> Cluster:
        p = Project(name, deserved, created_at=float(len(self.state.projects)), **kw)  # type: ignore[arg-type]
        self.state = replace(self.state, projects=(*self.state.projects, p))
        return self

    def submit(
        self, project: str, name: str, min: int = 1, max: int | None = None, gpus: int = 1, **kw: object
    ) -> Cluster:
        if self.sizes_for is not None and "allowed_replicas" not in kw:
            kw["allowed_replicas"] = self.sizes_for(name, min, max or min)
        if self.topology_for is not None and "topology" not in kw:
            kw["topology"] = self.topology_for(name)
        job = Job(project, name, min, max or min, gpus, submitted_at=self.now, **kw)  # type: ignore[arg-type]
        self.state = replace(self.state, jobs=(*self.state.jobs, job))
        return self

    def finish(self, project: str, name: str) -> Cluster:
        self.state = replace(self.state, jobs=tuple(j for j in self.state.jobs if j.key != (project, name)))
        return self

    def release_done(self) -> Cluster:
        self.state = finish_releases(self.state)
        return self

    def cycle(self) -> Plan:
        plan = plan_cycle(self.state, self.config, now=self.now)
        violations = check_invariants(self.state, plan, self.config, now=self.now)
        assert violations == [], f"{violations}\nstate: {self.state}\nplan: {plan}"
        self.states.append(self.state)
        self.state = apply_plan(self.state, plan, now=self.now, instant=not self.slow_release)
        self.plans.append(plan)
        self.now += 1.0
        return plan

    def elapse(self, seconds: float) -> Cluster:
        """Time passes with the allocation as it is: each project's usage above quota accrues (R14)."""
        over = over_quota(self.state)
        half_life = self.config.usage_half_life
        projects = tuple(
            replace(p, usage_gpu_seconds=accrue(p.usage_gpu_seconds, over[p.name], seconds, half_life))
            for p in self.state.projects
        )
        self.state = replace(self.state, projects=projects)
        self.now += seconds
        return self

    def run(self, cycles: int) -> list[Plan]:
        return [self.cycle() for _ in range(cycles)]

    def job(self, project: str, name: str) -> Job:
        return next(j for j in self.state.jobs if j.key == (project, name))

    def indices(self, project: str, name: str) -> list[int]:
        return sorted(r.index for r in self.job(project, name).active)

    def alloc(self, project: str) -> int:
        return sum(r.gpus for j in self.state.jobs if j.project == project for r in j.active)

    def claimant(self, rng: random.Random, turn: int) -> str:
        """Who submits a claim that reclaims on ``turn``: the project owed most (deserved less held) on even
        turns, any project on odd ones."""
        if turn % 2:
            return rng.choice([p.name for p in self.state.projects])
        return max(self.state.projects, key=lambda p: p.deserved_gpus - self.alloc(p.name)).name

    def decisions(self, plan: Plan) -> list[tuple[str, str, str, list[int]]]:
        """A plan as (action, project, job, replica indices): what scenario tables compare."""
        return [(d.action.value, d.project, d.job, [p.index for p in d.replicas]) for d in plan.decisions]
