"""Trace-driven simulator: replays a workload through the core's ``plan_cycle`` on a virtual clock.

Contract: uses only ``scheduler.core`` (checked by import-linter). Entry points: ``run_simulation(settings)``
(everything, returns summaries and writes the report) and ``main(argv)`` (the command line).
"""

from scheduler.simulator.cli import build_parser, main
from scheduler.simulator.runner import POLICIES, SimulationReport, SimulationSettings, run_simulation

__all__ = ["POLICIES", "SimulationReport", "SimulationSettings", "build_parser", "main", "run_simulation"]
