"""How right the start-time forecast is: the ETA given at a job's submission against the start that happened.

Contract: ``EtaSimulator`` is the ``Simulator`` plus one thing: at every ``every``-th submission it asks
``scheduler.core.forecast`` (the function the service runs) when that job will start, from the replay's state
at that instant and from estimates the service could make too: each job's time left comes from the jobs that
have finished so far in the replay (``scheduler.core.estimate``), or, with ``declared``, from the job's true run
time at its requested size, as if every user declared ``expected_duration`` exactly. The replay itself is
unchanged (asking is pure). ``accuracy`` compares each ETA with the job's first start, for all sampled jobs
and for those that waited more than a minute; ``eta_table`` prints that as markdown.

With ``log`` (a text file), each ETA is also written as a JSON line when given (with the CPU seconds the
forecast took) and each sampled job's first start when it happens, so a long replay can be summarised while
it runs or after it was cut off (``samples_from_log``, ``bench/eta.py``).

Definitions: error = |start_p50 - first start|; a job started *within its band* when it started no later than
``start_p90`` plus one cycle (the replay's cycles need not fall on the forecast's grid); a job whose forecast
found no start within the horizon counts under "no ETA" and not in the error figures.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from scheduler.core import ClusterState, Job, Plan
from scheduler.core.estimate import Estimate, Estimator, Finished, shape_of
from scheduler.core.forecast import Horizon, forecast
from scheduler.simulator.progress import Run
from scheduler.simulator.replay import Simulator
from scheduler.simulator.report import percentile
from scheduler.simulator.workload import JobSpec

Key = tuple[str, str]
HOUR = 3600.0
WAITED = 60.0  # seconds: the second group of the table is the jobs that waited longer than this


@dataclass(frozen=True, slots=True)
class EtaSample:
    """The ETA one job was given at its submission (times on the replay's clock)."""

    key: Key
    submitted: float
    start_p50: float | None
    start_p90: float | None
    source: str | None


@dataclass(frozen=True, slots=True)
class EtaRow:
    """Accuracy over one group of sampled jobs. Errors in hours; shares in percent of jobs with an ETA."""

    group: str
    jobs: int
    no_eta: int
    median_error_h: float
    p90_error_h: float
    within_band: float
    by_p50: float


class EtaSimulator(Simulator):
    """A replay that asks for an ETA at every ``every``-th submission (see the module docstring)."""

    def __init__(
        self,
        *args: Any,
        every: int,
        declared: bool = False,
        horizon: Horizon | None = None,
        log: TextIO | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(*args, **kw)
        if every < 1:
            raise ValueError("ask for an ETA every 1 or more submissions")
        self.every, self.declared = every, declared
        self.horizon = horizon or Horizon(cycle_seconds=self.opts.cycle_seconds)
        self.estimator = Estimator()
        self.arrivals = 0
        self.samples: list[EtaSample] = []
        self.log = log
        self.unstarted: set[Key] = set()  # sampled jobs not started yet (logged when they start)

    def _arrive(self, spec: JobSpec) -> None:
        super()._arrive(spec)
        self.arrivals += 1
        if self.arrivals % self.every == 0:
            cpu = time.process_time()
            sample = self._ask(spec.key)
            self.samples.append(sample)
            if self.log is not None:
                self.unstarted.add(sample.key)
                line = {
                    "job": "/".join(sample.key),
                    "submitted": sample.submitted,
                    "start_p50": sample.start_p50,
                }
                line |= {"start_p90": sample.start_p90, "source": sample.source}
                self._write(line | {"cpu_s": round(time.process_time() - cpu, 4)})

    def _apply(self, plan: Plan, now: float) -> None:
        super()._apply(plan, now)
        for key in {(d.project, d.job) for d in plan.decisions} & self.unstarted:
            self.unstarted.discard(key)
            self._write({"job": "/".join(key), "started": self.runs[key].first_start})

    def _write(self, line: dict[str, Any]) -> None:
        if self.log is not None:
            self.log.write(json.dumps(line) + "\n")
            self.log.flush()

    def _finish(self, key: Key, version: int, now: float) -> bool:
        done = super()._finish(key, version, now)
        if done:
            run = self.runs[key]
            started = run.first_start if run.first_start is not None else now
            job = Job(key[0], key[1], run.spec.min_replicas, run.spec.max_replicas, run.spec.gpus_per_replica)
            self.estimator.add(Finished(key[0], shape_of(job), now - started))
        return done

    def _left(self, job: Job) -> Estimate:
        run: Run = self.runs[job.key]
        elapsed = self.now - run.first_start if run.first_start is not None else 0.0
        declared = run.spec.work / run.spec.gpus if self.declared else None
        return self.estimator.remaining(job, elapsed, declared)

    def _ask(self, key: Key) -> EtaSample:
        state = ClusterState(self.nodes, self.projects, tuple(self.jobs.values()))
        left = {job.key: self._left(job) for job in state.jobs}
        eta = forecast(state, self.config, now=self.now, left=left, targets=(key,), horizon=self.horizon)[key]
        source = str(eta.source) if eta.source is not None else None
        return EtaSample(key, self.now, eta.start_p50, eta.start_p90, source)


def samples_from_log(lines: Iterable[str]) -> tuple[list[EtaSample], dict[Key, float], list[float]]:
    """(ETAs given, first starts, CPU seconds per forecast) read back from an ``EtaSimulator`` log."""
    samples, starts, cpu = [], {}, []
    for text in lines:
        line = json.loads(text)
        project, _, name = line["job"].partition("/")
        if "started" in line:
            starts[(project, name)] = float(line["started"])
        else:
            samples.append(
                EtaSample(
                    (project, name), line["submitted"], line["start_p50"], line["start_p90"], line["source"]
                )
            )
            cpu.append(float(line["cpu_s"]))
    return samples, starts, cpu


def _row(group: str, pairs: Sequence[tuple[EtaSample, float]], slack: float) -> EtaRow:
    given = [(s, start) for s, start in pairs if s.start_p50 is not None]
    errors = [abs(start - s.start_p50) / HOUR for s, start in given if s.start_p50 is not None]
    within = sum(1 for s, start in given if s.start_p90 is None or start <= s.start_p90 + slack)
    early = sum(1 for s, start in given if s.start_p50 is not None and start <= s.start_p50 + slack)
    share = 100.0 / len(given) if given else 0.0
    return EtaRow(
        group,
        len(pairs),
        len(pairs) - len(given),
        percentile(errors, 50),
        percentile(errors, 90),
        within * share,
        early * share,
    )


def accuracy(samples: Sequence[EtaSample], runs: Sequence[Run], cycle_seconds: float) -> tuple[EtaRow, ...]:
    """Rows for all sampled jobs that started, and for those of them that waited over a minute."""
    return accuracy_of(samples, {r.spec.key: r.first_start for r in runs}, cycle_seconds)


def accuracy_of(
    samples: Sequence[EtaSample], first: dict[Key, float | None] | dict[Key, float], cycle_seconds: float
) -> tuple[EtaRow, ...]:
    """``accuracy`` from the first starts of the jobs (None or missing: not started)."""
    pairs = [(s, start) for s in samples if (start := first.get(s.key)) is not None]
    waited = [(s, start) for s, start in pairs if start - s.submitted > WAITED]
    return (
        _row("all sampled jobs", pairs, cycle_seconds),
        _row(f"waited > {WAITED:g} s", waited, cycle_seconds),
    )


def eta_table(rows: Sequence[EtaRow]) -> str:
    head = (
        "| jobs | count | no ETA | median abs error h | p90 abs error h | started within band % "
        "| started by p50 % |\n|---|---|---|---|---|---|---|"
    )
    body = [
        f"| {r.group} | {r.jobs:,} | {r.no_eta:,} | {r.median_error_h:.2f} | {r.p90_error_h:.2f} | "
        f"{r.within_band:.1f} | {r.by_p50:.1f} |"
        for r in rows
    ]
    return "\n".join([head, *body])
