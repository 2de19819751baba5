"""GPU fractions (R20) through the REST API: a job asks for a share of one GPU, bad shares are a 422 that
says what to fix, and the issue's scenario runs end to end on a 1-node, 2-GPU service."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from servicekit import ADMIN, RunningService, wait_for

from api.client.rest import TideAPIError, TideClient

JOB = {"command": ["sleep", "60"]}


@pytest.fixture
def admin(db_url: str, make_service: Callable[..., RunningService]) -> TideClient:
    return make_service(db_url, gpus_per_node=2).client()


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"gpu_fraction": 0}, "from 0.05 to 0.95"),
        ({"gpu_fraction": 1}, "gpus_per_replica instead"),
        ({"gpu_fraction": -0.5}, "from 0.05 to 0.95"),
        ({"gpu_fraction": 0.01}, "from 0.05 to 0.95"),
        ({"gpu_fraction": 0.5, "gpus_per_replica": 2}, "not both"),
        ({"gpu_fraction": 0.5, "workers": 1, "min_replicas": 1}, "not elastic"),
    ],
)
def test_bad_shares_are_a_422_that_says_what_to_fix(
    admin: TideClient, body: dict[str, object], words: str
) -> None:
    admin.create_project({"name": "a", "deserved_gpus": 1})
    with pytest.raises(TideAPIError) as info:
        admin.submit("a", {"name": "nb", **JOB, **body})
    assert info.value.status_code == 422
    assert words in str(info.value)


def test_three_halves_share_two_gpus_and_a_whole_gpu_job_waits_for_the_one_a_half_leaves(
    admin: TideClient,
) -> None:
    admin.create_project({"name": "a", "deserved_gpus": 2})
    for name in ("n1", "n2", "n3"):
        job = admin.submit("a", {"name": name, "gpu_fraction": 0.5, **JOB})
        assert job.gpu_fraction == 0.5
    wait_for(lambda: all(admin.job("a", n).status == "running" for n in ("n1", "n2", "n3")), what="3 halves")
    replicas = {n: admin.job("a", n).replicas[0] for n in ("n1", "n2", "n3")}
    assert {r.share for r in replicas.values()} == {0.5}
    devices = sorted(tuple(r.gpu_ids or ()) for r in replicas.values())
    assert devices == [(0,), (0,), (1,)]  # two share device 0, the third is alone on device 1
    node = admin.nodes()[0]
    assert node.gpus == 2

    admin.submit("a", {"name": "whole", **JOB})
    wait_for(
        lambda: admin.job("a", "whole").queue_position == 1, what="the whole-GPU job to wait first in line"
    )
    assert admin.job("a", "whole").status == "pending"
    alone = next(n for n, r in replicas.items() if r.gpu_ids == [1])
    admin.delete_job("a", alone)
    job = wait_for(
        lambda: (j := admin.job("a", "whole")).replicas and j.replicas[0].gpu_ids and j,
        what="the whole job to run",
    )
    assert job.replicas[0].gpu_ids == [1]  # type: ignore[union-attr]
    assert job.status == "running"  # type: ignore[union-attr]


def test_a_project_with_quota_one_reclaims_a_gpu_for_two_half_notebooks(admin: TideClient) -> None:
    admin.create_project({"name": "a", "deserved_gpus": 1})
    admin.create_project({"name": "b", "deserved_gpus": 1})
    admin.submit("b", {"name": "train", "workers": 1, "min_replicas": 1, **JOB})
    wait_for(lambda: admin.project("b").allocated_gpus == 2, what="b to borrow both GPUs")
    for name in ("nb1", "nb2"):
        admin.submit("a", {"name": name, "gpu_fraction": 0.5, "interactive": True, **JOB})
    wait_for(
        lambda: all(
            (j := admin.job("a", n)).status == "running" and j.replicas[0].gpu_ids for n in ("nb1", "nb2")
        ),
        what="a's notebooks to run on their GPU",
    )
    devices = {tuple(admin.job("a", n).replicas[0].gpu_ids or ()) for n in ("nb1", "nb2")}
    assert len(devices) == 1  # both on one GPU
    # the shrink's replica is released in the cycle that places the notebooks; a read may fall between
    wait_for(lambda: admin.job("b", "train").replicas_now == 1, what="b's job to be shrunk to one replica")
    shrink = next(e for e in admin.events() if e.kind == "shrink" and e.job == "train")
    assert "reclaimed for a/nb1" in shrink.reason


def test_metrics_count_shared_gpus_and_booked_shares(
    db_url: str, make_service: Callable[..., RunningService]
) -> None:
    svc = make_service(db_url, gpus_per_node=2)
    client = svc.client()
    client.create_project({"name": "a", "deserved_gpus": 2})
    for name, share in (("n1", 0.5), ("n2", 0.25), ("n3", 0.75)):
        client.submit("a", {"name": name, "gpu_fraction": share, **JOB})
    wait_for(
        lambda: all(client.job("a", n).status == "running" for n in ("n1", "n2", "n3")), what="all to run"
    )
    text = httpx.get(f"{svc.url}/metrics", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30).text
    assert 'tide_project_shared_gpus{department="",project="a"} 2.0' in text  # 0.5 + 0.25 | 0.75
    assert 'tide_project_booked_gpu_fraction{department="",project="a"} 1.5' in text
    assert "tide_cluster_shared_gpus 2.0" in text
    assert 'tide_project_allocated_gpus{department="",project="a"} 2.0' in text  # a shared GPU counts as one
    assert client.project("a").allocated_gpus == 2
