"""The simulator's topology domains (R17): ``--domain-size`` puts its nodes in racks, and the report gives the
share of gangs started on several nodes that started inside one rack."""

from __future__ import annotations

import math
import random
from dataclasses import replace

from scheduler.simulator.cli import build_parser, settings_from
from scheduler.simulator.replay import Simulator
from scheduler.simulator.report import comparison_table, summarize
from scheduler.simulator.runner import build_projects, load_jobs, policy_config
from scheduler.simulator.trace import SyntheticSpec
from scheduler.simulator.workload import make_nodes, shape_jobs


def test_domain_size_puts_nodes_in_racks_in_order() -> None:
    nodes = make_nodes(40, 8, domain_size=2)
    assert [n.domain for n in nodes] == ["domain000", "domain000", "domain001", "domain001", "domain002"]
    assert {n.domain for n in make_nodes(16, 8)} == {None}
    assert settings_from(build_parser().parse_args(["--domain-size", "4"])).domain_size == 4


def test_the_report_says_how_many_multi_node_gangs_started_inside_one_rack_and_the_rule_raises_it() -> None:
    """64 GPUs on 4-GPU nodes in racks of four; a mix of big gangs. Placing by rack (R17) starts more of the
    multi-node gangs inside one rack than the same replay with the rule off."""
    settings = settings_from(
        build_parser().parse_args(
            ["--gpus", "64", "--gpus-per-node", "4", "--domain-size", "4", "--jobs", "200"]
        )
    )
    settings = replace(
        settings, synthetic=SyntheticSpec(jobs=200, size_mix=((1, 2), (4, 1), (8, 2), (16, 1)))
    )
    rng = random.Random(0)
    jobs = load_jobs(settings, rng)
    projects = build_projects(settings, jobs)
    nodes = make_nodes(settings.gpus, settings.gpus_per_node, settings.domain_size)
    specs = shape_jobs(jobs, projects, settings.workload, rng, settings.gpus)
    shares = {}
    for rule in (True, False):
        config = replace(policy_config("tide", 10.0), topology=rule)
        result = Simulator(nodes, projects, specs, config).run()
        assert result.counters.multi_node_starts > 20
        shares[rule] = summarize("tide", result).one_domain_share
    assert 0 < shares[False] < shares[True] <= 1
    flat = Simulator(make_nodes(64, 4), projects, specs, policy_config("tide", 10.0)).run()
    assert math.isnan(summarize("tide", flat).one_domain_share)  # no racks: nothing to report
    assert "multi-node gangs in one domain %" in comparison_table([summarize("tide", flat)])
