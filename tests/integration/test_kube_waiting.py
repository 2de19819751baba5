"""A pod that is made but does not start is not running: its replica stays ``starting``, its job says why.

Against the fake API server, whose kubelet backs off pulling an image it cannot pull (``ImagePullBackOff``,
as a real kubelet does), holding the pod's GPUs meanwhile: the replica is not counted as running, and the
job's message quotes the kubelet; once the image can be pulled the pod runs, the replica is ``running``
and the message is gone; its ``started_at`` is then the container's start, not the pod's creation.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kubefake import FakeKubeApi
from kubefake.harness import IMAGE, kube_executor, wait_for
from servicekit import RunningService

MISSING = "registry.example/missing:1"


def test_an_image_that_cannot_be_pulled_keeps_the_replica_starting_with_the_reason(
    api: FakeKubeApi, make_service: Callable[..., RunningService], tmp_path: Path
) -> None:
    api.kubelets.unpullable.add(MISSING)
    service = make_service(
        None,
        with_executor=kube_executor(api, tmp_path),
        executor="kubernetes",
        cycle_period=0.1,
        default_image=IMAGE,
    )
    client = service.client()
    client.create_project({"name": "a", "deserved_gpus": 4})
    client.submit("a", {"name": "train", "workers": 0, "image": MISSING, "command": ["python", "t.py"]})
    said = lambda: "ImagePullBackOff" in (client.job("a", "train").message or "")  # noqa: E731
    wait_for(said, what="the kubelet's reason on the job")
    job = client.job("a", "train")
    assert [r.status for r in job.replicas] == ["starting"]
    made_at = job.replicas[0].started_at
    assert job.message is not None and job.message.startswith("replica 0 waits to start: pod tide-a-train-")
    assert f'Back-off pulling image "{MISSING}"' in job.message
    api.kubelets.unpullable.discard(MISSING)
    wait_for(lambda: [r.status for r in client.job("a", "train").replicas] == ["running"], what="it to run")
    job = client.job("a", "train")
    assert job.message is None
    assert made_at is not None and job.replicas[0].started_at is not None
    assert job.replicas[0].started_at > made_at  # its start is its container's, not its pod's creation
