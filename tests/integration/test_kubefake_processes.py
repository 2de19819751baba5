"""The fake API server's process mode, through the real ``kubernetes`` client: pods run as real processes.

What a test that runs real programs in "pods" relies on: the container's environment (a Secret's key,
the Downward API, ``$(VAR)`` expansion, Service names and mount paths mapped to this machine), its log
and exit code as a real API server reports them, graceful deletion with real signals (SIGTERM, then
SIGKILL when the grace runs out), a pod waiting on a missing Secret, volumes shared through a claim, and
no process outliving the fake.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kubefake import FakeKubeApi
from kubefake.containers import ProcessOptions, expand
from kubefake.harness import wait_for
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

NS = "default"
PATH = f"{Path(sys.executable).parent}:/usr/bin:/bin"  # the "image" has this venv's python
PRINT_ENV = """
import os, sys
for key in sys.argv[1].split(","):
    print(key + "=" + os.environ.get(key, "<unset>"))
print("argv=" + "|".join(sys.argv[2:]))
print("cwd=" + os.getcwd())
print("to stderr", file=sys.stderr)
sys.exit(3)
"""
WAIT_FOR_SIGTERM = """
import os, signal, subprocess, sys, time
def on_term(*_):
    print("got SIGTERM, {}".format(sys.argv[1]), flush=True)
    if sys.argv[1] == "exiting":
        sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
ignore = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('child ready', flush=True); time.sleep(60)"
child = subprocess.Popen([sys.executable, "-c", ignore])  # outlives SIGTERM: only SIGKILL ends it
print("pids", os.getpid(), child.pid, flush=True)
while True:
    time.sleep(0.02)
"""


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeKubeApi]:
    base_env = {"PATH": PATH, "HOME": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    api = FakeKubeApi(processes=ProcessOptions(work_dir=tmp_path / "kubelet", base_env=base_env)).start()
    api.add_node("gpu-0", 2)
    yield api
    api.stop()


@pytest.fixture
def core(fake: FakeKubeApi, tmp_path: Path) -> Iterator[client.CoreV1Api]:
    api_client = kubernetes.config.new_client_from_config(str(fake.kubeconfig(tmp_path / "kubeconfig")))
    yield client.CoreV1Api(api_client)
    api_client.close()


def pod(name: str, command: list[str], **container: Any) -> dict[str, Any]:
    spec = {"nodeName": "gpu-0", "restartPolicy": "Never", "containers": []}
    volumes = container.pop("volumes", None)
    if volumes:
        spec["volumes"] = volumes
    spec["containers"] = [{"name": "main", "image": "ignored:1", "command": command, **container}]
    return {"metadata": {"name": name, "labels": {"app": name}}, "spec": spec}


def python(script: str, *args: str) -> list[str]:
    return ["python", "-c", script, *args]


def phase(core: client.CoreV1Api, name: str) -> str:
    return str(core.read_namespaced_pod(name, NS).status.phase)


def log(core: client.CoreV1Api, name: str) -> str:
    return str(core.read_namespaced_pod_log(name, NS))


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")  # a zombie nobody reaped yet is dead all the same


def log_once_started(core: client.CoreV1Api, name: str) -> str:
    try:
        return log(core, name)
    except ApiException as error:
        if error.status != 400:  # 400: "waiting to start", as a real API server answers
            raise
        return ""


def started_pids(core: client.CoreV1Api, name: str) -> tuple[int, int]:
    def ready() -> re.Match[str] | None:
        text = log_once_started(core, name)
        return re.search(r"pids (\d+) (\d+)", text) if "child ready" in text else None

    line = wait_for(ready, 5, "its processes to be ready")
    return int(line[1]), int(line[2])


def delete_and_watch(
    core: client.CoreV1Api, name: str, grace: int, meanwhile: Callable[[], None] = lambda: None
) -> tuple[Any, float]:
    """Delete with ``grace``, run ``meanwhile``; the container's final state (from the DELETED event) and
    how long after the delete it came."""
    rv = core.list_namespaced_pod(NS).metadata.resource_version
    began = time.monotonic()
    core.delete_namespaced_pod(name, NS, grace_period_seconds=grace)
    meanwhile()
    stream = watch.Watch().stream(
        core.list_namespaced_pod, NS, label_selector=f"app={name}", resource_version=rv, timeout_seconds=8
    )
    for event in stream:
        if event["type"] == "DELETED":
            return event["object"].status.container_statuses[0].state.terminated, time.monotonic() - began
    raise AssertionError(f"pod {name} was not deleted")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(A)-$(B)", "a-$(B)"),
        ("$$(A)", "$(A)"),
        ("$$$(A)", "$a"),
        ("$(A", "$(A"),
        ("$A $", "$A $"),
        ("x$()y", "x$()y"),
        ("$(A)$(A)", "aa"),
    ],
)
def test_expansion_follows_kubernetes(text: str, expected: str) -> None:
    assert expand(text, {"A": "a"}) == expected


def test_container_env_argv_log_and_exit_code(
    fake: FakeKubeApi, core: client.CoreV1Api, tmp_path: Path
) -> None:
    core.create_namespaced_secret(NS, {"metadata": {"name": "creds"}, "stringData": {"token": "s3cret"}})
    core.create_namespaced_service(NS, {"metadata": {"name": "rdzv"}, "spec": {"clusterIP": "None"}})
    env = [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
        {"name": "SPARE", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": True}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "ADDR", "value": "$(POD_IP):29500"},
        {"name": "EARLY", "value": "$(LATE) costs $$(5)"},
        {"name": "LATE", "value": "late"},
        {"name": "MASTER", "value": "rdzv.default.svc:29400"},
        {"name": "SHORT", "value": "rdzv"},
        {"name": "NOT_A_HOST", "value": "rdzv.py"},
        {"name": "CKPT", "value": "/ckpt/run-1"},
        {"name": "OTHER", "value": "/ckptx/a:/srv/ckpt"},
    ]
    keys = ",".join(e["name"] for e in env)
    args = [keys, "--at=$(ADDR)", "--dir=/ckpt/out", "rdzv.default.svc.cluster.local:1", "$(NONE)"]
    volume = {"name": "c", "persistentVolumeClaim": {"claimName": "shared"}}
    body = pod(
        "printer",
        ["python", "-c", PRINT_ENV],
        args=args,
        env=env,
        workingDir="/ckpt",
        volumeMounts=[{"name": "c", "mountPath": "/ckpt"}],
        volumes=[volume],
    )
    core.create_namespaced_pod(NS, body)
    wait_for(lambda: phase(core, "printer") == "Failed", 8, "the process to exit")
    claim = tmp_path / "kubelet" / "claims" / NS / "shared"
    assert log(core, "printer").splitlines() == [
        "TOKEN=s3cret",
        "SPARE=<unset>",
        "POD_IP=127.0.0.1",
        "POD_NAME=printer",
        "ADDR=127.0.0.1:29500",
        "EARLY=$(LATE) costs $(5)",
        "LATE=late",
        "MASTER=127.0.0.1:29400",
        "SHORT=127.0.0.1",
        "NOT_A_HOST=rdzv.py",
        f"CKPT={claim}/run-1",
        "OTHER=/ckptx/a:/srv/ckpt",
        f"argv=--at=127.0.0.1:29500|--dir={claim}/out|127.0.0.1:1|$(NONE)",
        f"cwd={claim}",
        "to stderr",
    ]
    status = core.read_namespaced_pod("printer", NS).status
    terminated = status.container_statuses[0].state.terminated
    assert (status.pod_ip, terminated.exit_code, terminated.reason) == ("127.0.0.1", 3, "Error")
    assert log(core, "printer") == core.read_namespaced_pod_log("printer", NS, tail_lines=15)


def test_a_pod_that_exits_on_sigterm_ends_at_once(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod("polite", python(WAIT_FOR_SIGTERM, "exiting")))
    leader, child = started_pids(core, "polite")
    terminated, took = delete_and_watch(core, "polite", grace=5)
    assert (terminated.exit_code, terminated.reason) == (0, "Completed")
    assert took < 2.0
    assert not alive(leader)
    wait_for(lambda: not alive(child), 2, "its child to be killed with the group")


def test_a_pod_that_ignores_sigterm_is_killed_when_the_grace_runs_out(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod("stubborn", python(WAIT_FOR_SIGTERM, "ignoring")))
    leader, child = started_pids(core, "stubborn")

    def sigterm_first() -> None:
        wait_for(lambda: "got SIGTERM, ignoring" in log(core, "stubborn"), 0.8, "SIGTERM to reach it")
        assert alive(leader) and alive(child)

    terminated, took = delete_and_watch(core, "stubborn", grace=1, meanwhile=sigterm_first)
    assert (terminated.exit_code, terminated.reason) == (137, "Error")
    assert 0.9 <= took < 2.0
    assert not alive(leader)
    wait_for(lambda: not alive(child), 2, "its child to be killed with the group")


def test_a_pod_deleted_at_once_has_its_processes_killed(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod("forced", python(WAIT_FOR_SIGTERM, "ignoring")))
    leader, child = started_pids(core, "forced")
    core.delete_namespaced_pod("forced", NS, grace_period_seconds=0)
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_pod("forced", NS)
    assert gone.value.status == 404
    wait_for(lambda: not alive(leader) and not alive(child), 2, "its processes to be killed")


ESCAPING_CHILD = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
print("pids", os.getpid(), child.pid, "child ready", flush=True)
time.sleep(0.3)  # the main process ends; the child, in a session of its own, would go on
"""


def test_a_child_in_a_session_of_its_own_ends_with_its_container(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod("escaper", python(ESCAPING_CHILD)))
    _, child = started_pids(core, "escaper")
    wait_for(lambda: phase(core, "escaper") == "Succeeded", 10, "the main process to end")
    wait_for(lambda: not alive(child), 5, "the child to end with its container (a cgroup would end it)")


def test_a_pod_waits_for_its_secret_and_starts_once_it_exists(core: client.CoreV1Api) -> None:
    secret_env = {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "late", "key": "token"}}}
    script = "import os; print('token', os.environ['TOKEN'])"
    core.create_namespaced_pod(NS, pod("patient", python(script), env=[secret_env]))

    def waiting() -> Any:
        statuses = core.read_namespaced_pod("patient", NS).status.container_statuses
        return statuses and statuses[0].state.waiting

    state = wait_for(waiting, 3, "the container to wait")
    assert (state.reason, state.message) == ("CreateContainerConfigError", 'secret "late" not found')
    with pytest.raises(ApiException) as refused:
        log(core, "patient")
    assert (
        refused.value.status == 400
        and "is waiting to start: CreateContainerConfigError" in refused.value.body
    )
    core.create_namespaced_secret(NS, {"metadata": {"name": "late"}, "stringData": {"other": "x"}})
    wanted = "couldn't find key token in Secret default/late"
    wait_for(lambda: waiting().message == wanted, 3, "the missing key to be reported")
    time.sleep(0.2)
    assert phase(core, "patient") == "Pending"
    core.patch_namespaced_secret("late", NS, {"stringData": {"token": "finally"}})
    wait_for(lambda: phase(core, "patient") == "Succeeded", 5, "the pod to run once its Secret is complete")
    assert log(core, "patient") == "token finally\n"


def test_pods_sharing_a_claim_see_each_others_files_and_not_their_empty_dirs(
    core: client.CoreV1Api,
) -> None:
    script = """
import os, sys, time
me, other = sys.argv[1], sys.argv[2]
open(os.path.join(os.environ["DATA"], me), "w").write(me)
open(os.path.join(os.environ["SCRATCH"], me), "w").write(me)
deadline = time.monotonic() + 5
while not os.path.exists(os.path.join(os.environ["DATA"], other)):
    if time.monotonic() > deadline:
        sys.exit(1)
    time.sleep(0.02)
print(sorted(os.listdir(os.environ["DATA"])), sorted(os.listdir(os.environ["SCRATCH"])))
"""
    mounts = [{"name": "d", "mountPath": "/data"}, {"name": "s", "mountPath": "/scratch"}]
    volumes = [{"name": "d", "persistentVolumeClaim": {"claimName": "team"}}, {"name": "s", "emptyDir": {}}]
    for me, other in (("a", "b"), ("b", "a")):
        body = pod(
            f"share-{me}",
            python(script, me, other),
            env=[{"name": "DATA", "value": "/data"}, {"name": "SCRATCH", "value": "/scratch"}],
            volumeMounts=mounts,
            volumes=volumes,
        )
        core.create_namespaced_pod(NS, body)
    for me in ("a", "b"):
        wait_for(lambda me=me: phase(core, f"share-{me}") in ("Succeeded", "Failed"), 8, f"pod {me}")
        assert phase(core, f"share-{me}") == "Succeeded", log(core, f"share-{me}")
        assert log(core, f"share-{me}") == f"['a', 'b'] ['{me}']\n"


def test_a_program_that_cannot_run_fails_the_pod_with_start_error(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod(NS, pod("typo", ["no-such-program-here"]))
    wait_for(lambda: phase(core, "typo") == "Failed", 3, "the pod to fail")
    terminated = core.read_namespaced_pod("typo", NS).status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (128, "StartError")


def test_secrets_are_served_like_the_api_server(core: client.CoreV1Api) -> None:
    made = core.create_namespaced_secret(NS, {"metadata": {"name": "s.one"}, "stringData": {"k": "v"}})
    assert (made.data, made.string_data, made.type) == ({"k": "dg=="}, None, "Opaque")
    with pytest.raises(ApiException) as taken:
        core.create_namespaced_secret(NS, {"metadata": {"name": "s.one"}})
    assert taken.value.status == 409
    assert [s.metadata.name for s in core.list_namespaced_secret(NS).items] == ["s.one"]
    stale = {"metadata": {"name": "s.one", "resourceVersion": "1"}, "data": {"k": "dw=="}}
    with pytest.raises(ApiException) as conflict:
        core.replace_namespaced_secret("s.one", NS, stale)
    assert conflict.value.status == 409
    fresh = {**stale, "metadata": {"name": "s.one", "resourceVersion": made.metadata.resource_version}}
    assert core.replace_namespaced_secret("s.one", NS, fresh).data == {"k": "dw=="}
    core.delete_namespaced_secret("s.one", NS)
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_secret("s.one", NS)
    assert gone.value.status == 404


def test_stop_kills_every_process_it_started(tmp_path: Path) -> None:
    base_env = {"PATH": PATH}
    api = FakeKubeApi(processes=ProcessOptions(work_dir=tmp_path, base_env=base_env)).start()
    runtime = api.processes
    assert runtime is not None
    try:
        api.add_node("gpu-0", 1)
        body = pod("left", python(WAIT_FOR_SIGTERM, "ignoring"))
        api.store.create("pods", NS, {**body, "status": {"phase": "Pending"}})
        found = wait_for(
            lambda: re.search(r"pids (\d+) (\d+)", runtime.log_text(NS, "left") or ""), 5, "pids"
        )
        pids = [int(found[1]), int(found[2])]
        assert all(alive(p) for p in pids)
    finally:
        began = time.monotonic()
        api.stop()
    assert time.monotonic() - began < 5
    wait_for(lambda: not any(alive(p) for p in pids), 2, "no process to outlive the fake")
