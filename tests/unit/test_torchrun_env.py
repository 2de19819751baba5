"""The environment Tide gives a replica, and proof that torchrun 2.13 reads every PET_* variable of it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from scheduler.elastic.environment import (
    RendezvousTuning,
    ReplicaLaunch,
    nproc_for,
    pod_env,
    rdzv_conf,
    shutdown_timeout,
    torchrun_env,
)
from scheduler.elastic.launch import Role, run_id_for
from scheduler.elastic.torchrun_argv import DEFAULT_MAX_RESTARTS, job_max_restarts, uses_torchrun


def launch(**overrides: object) -> ReplicaLaunch:
    base = ReplicaLaunch(
        job="bert",
        project="a",
        replica_index=0,
        run_id="a.bert.g1",
        rdzv_host="10.0.0.5",
        rdzv_port=29400,
        min_nodes=2,
        max_nodes=4,
        checkpoint_dir="/data/ckpt/a/bert",
    )
    return dataclasses.replace(base, **overrides)  # type: ignore[arg-type]


def test_master_replica_env_is_complete() -> None:
    assert torchrun_env(launch()) == {
        "PET_NNODES": "2:4",
        "PET_NPROC_PER_NODE": "1",
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": "10.0.0.5:29400",
        "PET_RDZV_ID": "a.bert.g1",
        "PET_RDZV_CONF": "is_host=1,join_timeout=300,last_call_timeout=3,"
        "keep_alive_interval=1,keep_alive_max_attempt=3",
        "PET_MAX_RESTARTS": "3",
        "PET_MONITOR_INTERVAL": "0.5",
        "PET_SHUTDOWN_TIMEOUT": "30",
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
        "TIDE_JOB": "bert",
        "TIDE_PROJECT": "a",
        "TIDE_REPLICA_INDEX": "0",
        "TIDE_REPLICA_ROLE": "master",
        "TIDE_CHECKPOINT_DIR": "/data/ckpt/a/bert",
    }


def test_only_the_master_hosts_the_rendezvous_and_all_replicas_meet_there() -> None:
    envs = [torchrun_env(launch(replica_index=i)) for i in range(4)]
    assert [e["TIDE_REPLICA_ROLE"] for e in envs] == ["master", "worker", "worker", "worker"]
    assert [e["PET_RDZV_CONF"].split(",")[0] for e in envs] == ["is_host=1"] + ["is_host=0"] * 3
    assert {e["PET_RDZV_ENDPOINT"] for e in envs} == {"10.0.0.5:29400"}
    assert {e["PET_RDZV_ID"] for e in envs} == {"a.bert.g1"}
    assert [e["TIDE_REPLICA_INDEX"] for e in envs] == ["0", "1", "2", "3"]


def test_fixed_size_launch_for_a_coordinated_resize() -> None:
    resized = launch(replica_index=1).at_fixed_size(2, run_id_for("a", "bert", 2))
    env = torchrun_env(resized)
    assert env["PET_NNODES"] == "2:2"
    assert env["PET_RDZV_ID"] == "a.bert.g2"
    assert resized.role is Role.WORKER


def test_tuning_and_options_reach_the_environment() -> None:
    tuned = launch(
        nproc_per_node=nproc_for(8),
        max_restarts=0,
        local_addr="127.0.0.1",
        tuning=RendezvousTuning(monitor_interval_s=2, shutdown_timeout_s=5, last_call_timeout_s=1),
    )
    env = torchrun_env(tuned)
    assert env["PET_NPROC_PER_NODE"] == "8"
    assert env["PET_MAX_RESTARTS"] == "0"
    assert env["PET_LOCAL_ADDR"] == "127.0.0.1"
    assert env["PET_MONITOR_INTERVAL"] == "2"
    assert env["PET_SHUTDOWN_TIMEOUT"] == "5"
    assert "last_call_timeout=1" in rdzv_conf(tuned)


def test_ipv6_rendezvous_host_is_bracketed() -> None:
    assert torchrun_env(launch(rdzv_host="fd00::1"))["PET_RDZV_ENDPOINT"] == "[fd00::1]:29400"


@pytest.mark.parametrize(("gpus", "nproc"), [(0, 1), (1, 1), (4, 4)])
def test_one_worker_per_gpu_or_one_on_cpu(gpus: int, nproc: int) -> None:
    assert nproc_for(gpus) == nproc


def test_run_ids_differ_per_launch_and_are_safe_in_rdzv_conf() -> None:
    ids = {run_id_for("team a", "job=1,x", g) for g in range(3)}
    assert len(ids) == 3
    assert all("," not in i and "=" not in i and " " not in i for i in ids)


def test_pod_env_is_a_sorted_kubernetes_env_list() -> None:
    env = pod_env({"B": "2", "A": "1"})
    assert env == [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]


@pytest.mark.parametrize(
    "overrides",
    [
        {"min_nodes": 0},
        {"min_nodes": 5},
        {"replica_index": 4},
        {"replica_index": -1},
        {"rdzv_port": 0},
        {"rdzv_port": 70000},
        {"nproc_per_node": 0},
        {"max_restarts": -1},
        {"job": ""},
        {"run_id": "a,b"},
    ],
)
def test_invalid_launches_are_rejected(overrides: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        launch(**overrides)


@pytest.mark.parametrize(
    "kwargs", [{"keep_alive_interval_s": 0}, {"monitor_interval_s": 0}, {"shutdown_timeout_s": -1}]
)
def test_invalid_tuning_is_rejected(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RendezvousTuning(**kwargs)  # type: ignore[arg-type]


def test_nproc_for_rejects_negative_gpus() -> None:
    with pytest.raises(ValueError):
        nproc_for(-1)


def test_torchrun_reads_every_variable_we_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parse the env with torchrun's own parser: a PET_* name it does not know would be silently ignored."""
    run = pytest.importorskip("torch.distributed.run")
    rendezvous = pytest.importorskip("torch.distributed.elastic.rendezvous")
    dynamic_rendezvous = pytest.importorskip("torch.distributed.elastic.rendezvous.dynamic_rendezvous")

    tuned = launch(
        replica_index=1,
        nproc_per_node=2,
        local_addr="127.0.0.1",
        tuning=RendezvousTuning(monitor_interval_s=0.25, shutdown_timeout_s=7),
    )
    env = torchrun_env(tuned)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # config_from_args would set it process-wide otherwise
    for key, value in env.items():
        monkeypatch.setenv(key, value)

    parser = run.get_args_parser()
    dests = {a.dest for a in parser._actions}
    for key in env:
        if key.startswith("PET_"):
            assert key.removeprefix("PET_").lower() in dests, f"torchrun has no option for {key}"

    args = parser.parse_args(["train.py"])
    config, _, _ = run.config_from_args(args)
    assert (config.min_nodes, config.max_nodes, config.nproc_per_node) == (2, 4, 2)
    assert (config.rdzv_backend, config.rdzv_endpoint, config.run_id) == (
        "c10d",
        "10.0.0.5:29400",
        "a.bert.g1",
    )
    assert (config.max_restarts, config.monitor_interval, config.shutdown_timeout) == (3, 0.25, 7)
    assert config.local_addr == "127.0.0.1"

    params = rendezvous.RendezvousParameters(
        "c10d", config.rdzv_endpoint, config.run_id, config.min_nodes, config.max_nodes, **config.rdzv_configs
    )
    assert params.get_as_bool("is_host") is False
    assert params.get_as_int("keep_alive_interval") == 1
    assert params.get_as_int("keep_alive_max_attempt") == 3
    assert params.get_as_int("last_call_timeout") == 3
    assert params.get_as_int("join_timeout") == 300
    # Not a PET_ option: the c10d handler reads this one straight from the environment.
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" in Path(dynamic_rendezvous.__file__).read_text()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["torchrun", "train.py"], True),
        (["/opt/venv/bin/torchrun", "--nproc-per-node=2", "train.py"], True),
        (["python", "-m", "torch.distributed.run", "train.py"], True),
        (["python3", "train.py"], False),
        (["sleep", "600"], False),
        (["python", "-m", "torch"], False),
        ([], False),
    ],
)
def test_a_job_opts_in_by_launching_with_torchrun(argv: list[str], expected: bool) -> None:
    assert uses_torchrun(argv) is expected


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        (["torchrun", "train.py"], {}, DEFAULT_MAX_RESTARTS),
        (["torchrun", "--max-restarts=5", "train.py"], {}, 5),
        (["torchrun", "--max_restarts", "0", "train.py"], {"PET_MAX_RESTARTS": "7"}, 0),
        (["torchrun", "train.py"], {"PET_MAX_RESTARTS": "7"}, 7),
        (["torchrun", "train.py", "--max-restarts=x"], {"PET_MAX_RESTARTS": "bad"}, DEFAULT_MAX_RESTARTS),
    ],
)
def test_the_jobs_max_restarts_come_from_its_command_then_its_env(
    argv: list[str], env: dict[str, str], expected: int
) -> None:
    assert job_max_restarts(argv, env) == expected


def test_the_agents_shutdown_timeout_fits_inside_the_executors_grace() -> None:
    for grace in (0.5, 2, 9.9, 10, 30, 120):
        assert shutdown_timeout(grace) >= 1 and (shutdown_timeout(grace) < grace or grace < 2)
    assert shutdown_timeout(30) == 25
