"""The pure scheduling core: ``plan_cycle(state, config, *, now) -> Plan`` and its data types.

Nothing in this package reads a clock, generates ids, uses randomness or does I/O (checked by import-linter).
"""

from scheduler.core.cycle import apply_plan, plan_cycle
from scheduler.core.model import ClusterState, Config, Department, Job, JobPhase, Node, Project, Replica
from scheduler.core.plan import Action, Cause, Decision, JobNote, Placement, Plan, ProjectShare

__all__ = [
    "Action",
    "Cause",
    "ClusterState",
    "Config",
    "Decision",
    "Department",
    "Job",
    "JobNote",
    "JobPhase",
    "Node",
    "Placement",
    "Plan",
    "Project",
    "ProjectShare",
    "Replica",
    "apply_plan",
    "plan_cycle",
]
