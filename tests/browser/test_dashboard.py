"""The dashboard in a real browser, following the seed scenario as it happens on a real ``tide serve``.

Four nodes of one GPU; projects a and b (department research) deserve 2 each. a's elastic job (min 2,
max 4) borrows all 4 GPUs; b submits two 1-GPU jobs: a's workers 3 and 2 are told to stop and the page
shows their GPUs being reclaimed and b's jobs waiting with the reason; a's workers exit (they wait for a
file the test writes, standing in for a checkpoint that takes a while) and b runs; b's jobs are deleted and
a grows back to 4. After each change seen in the API, the page must show it within 5 s. The page polls
with ``If-None-Match`` (an unchanged poll is a 304), asks for the token once, and logs no console error.
A screenshot of each stage goes to the ``shots`` directory.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from integration.servicekit import wait_for
from playwright.sync_api import Page, expect

from api.client.rest import TideClient

SHOW_WITHIN_MS = 5_000  # docs/dashboard.md's promise: a change in the API is on the page within 5 s
# a's replicas print who they are, then on SIGTERM wait for RELEASE before exiting (a slow checkpoint).
ELASTIC = """echo "replica $TIDE_REPLICA_INDEX of $TIDE_NUM_REPLICAS on $TIDE_NODE (GPU $TIDE_GPU_IDS)"
trap 'echo "SIGTERM: saving a checkpoint"; while [ ! -e "$RELEASE" ]; do sleep 0.05; done; exit 0' TERM
sleep 600 & wait"""


class Stages:
    """Screenshots and how long the page took to show each change the API had made."""

    def __init__(self, page: Page, shots: Path, first: int = 1) -> None:
        self.page, self.shots, self.lags = page, shots, {}
        self.count = first - 1

    def seen(
        self, name: str, since: float | None, *checks: Callable[[], None], full_page: bool = True
    ) -> None:
        """Run the page checks (each waits up to 5 s), note the lag behind the API, take a screenshot."""
        for check in checks:
            check()
        self.count += 1
        path = self.shots / f"{self.count:02d}-{name}.png"
        lag = ""
        if since is not None:
            self.lags[name] = time.monotonic() - since
            lag = f": on the page {self.lags[name]:.2f} s after the API"
        self.page.screenshot(path=str(path), full_page=full_page)
        print(f"{path}{lag}")


def api_now(predicate: Callable[[], object], what: str) -> float:
    """Wait until the API shows a change; return when it did."""
    wait_for(predicate, timeout=30, what=what)
    return time.monotonic()


def replicas(client: TideClient, project: str, job: str) -> list[tuple[int, str]]:
    return [(r.index, r.status) for r in client.job(project, job).replicas if r.pid]


def shrink_headlines(client: TideClient) -> list[str]:
    """What the page says for each shrink of a's job in the API (one per cycle: b's submits may be two)."""
    said = []
    for event in client.events(project="a", job="elastic"):
        if event.kind == "shrink":
            *most, last = event.replicas
            which = f"replicas {', '.join(map(str, most))} and {last}" if most else f"replica {last}"
            said.append(f"a/elastic shrank: {which} stopped; the master keeps running")
    assert sorted(i for e in client.events(project="a") if e.kind == "shrink" for i in e.replicas) == [2, 3]
    return said


def gpus(page: Page, **data: str) -> Any:
    selector = "".join(f'[data-{key}="{value}"]' for key, value in data.items())
    return page.locator(f"#node-list .gpu{selector}")


def job_row(page: Page, key: str, role: str) -> Any:
    return page.locator(f'#job-rows tr[data-job="{key}"] [data-role="{role}"]')


def sign_in(page: Page, tide: Any) -> None:
    page.goto(tide.url + "/")
    expect(page.locator("#token-dialog")).to_be_visible()
    page.fill("#token-input", tide.token)
    page.click("#token-submit")
    expect(page.locator("#token-dialog")).to_be_hidden()


MS = {"timeout": SHOW_WITHIN_MS}


@pytest.mark.slow
def test_dashboard_follows_the_seed_scenario(tide: Any, page: tuple[Page, Any], shots: Path) -> None:
    tab, console = page
    client = tide.client()
    client.create_department({"name": "research", "deserved_gpus": 4})
    client.create_project({"name": "a", "deserved_gpus": 2, "department": "research"})
    client.create_project({"name": "b", "deserved_gpus": 2, "department": "research"})
    sign_in(tab, tide)
    stages = Stages(tab, shots)
    release = tide.data_dir.parent / "release"

    a_borrows_every_gpu(client, stages, release)
    unchanged_poll_is_a_304(tab)
    b_submits_and_a_shrinks(client, stages)
    release.touch()  # a's stopping workers finish their checkpoint and exit
    b_runs_on_the_freed_gpus(client, stages)
    b_finishes_and_a_grows_back(client, stages)
    job_detail_and_logs(stages)
    tab.set_viewport_size({"width": 2560, "height": 1440})
    tab.click("#detail-close")
    tab.click("#large-type")
    expect(tab.locator("#detail")).to_be_hidden()
    stages.seen("wall-display-large-type", None)
    tab.click("#large-type")
    tab.set_viewport_size({"width": 1280, "height": 720})
    stages.seen("laptop-1280", None, full_page=False)
    tab.set_viewport_size({"width": 390, "height": 844})
    assert tab.evaluate("document.documentElement.scrollWidth") <= 390, "the page scrolls sideways on a phone"
    stages.seen("phone-390", None)

    assert console.errors == []
    assert max(stages.lags.values()) < SHOW_WITHIN_MS / 1000


def a_borrows_every_gpu(client: TideClient, stages: Stages, release: Path) -> None:
    tab = stages.page
    job = {"name": "elastic", "workers": 3, "min_replicas": 2, "max_replicas": 4}
    client.submit("a", {**job, "command": ["sh", "-c", ELASTIC], "env": {"RELEASE": str(release)}})
    since = api_now(lambda: len(replicas(client, "a", "elastic")) == 4, "a to run 4 replicas")
    stages.seen(
        "a-borrows-all-4-gpus",
        since,
        lambda: expect(job_row(tab, "a/elastic", "replicas")).to_have_text("4 / 2 / 4", **MS),
        lambda: expect(gpus(tab, project="a", state="running")).to_have_count(4, **MS),
        lambda: expect(gpus(tab, project="a", role="master")).to_have_count(1),
        lambda: expect(tab.locator('.project[data-project="a"] [data-role="over-quota"]')).to_contain_text(
            "+2 over quota"
        ),
        lambda: expect(tab.locator("#now-body")).to_contain_text("a/elastic started with 4 replicas"),
        lambda: expect(tab.locator('.dept[data-department="research"] h3')).to_have_text(
            "Department research"
        ),
    )


def unchanged_poll_is_a_304(tab: Page) -> None:
    """Nothing changes now: the page's next poll of /cluster is answered 304 Not Modified."""
    tab.wait_for_event(
        "response", predicate=lambda r: r.url.endswith("/api/v1/cluster") and r.status == 304, timeout=6_000
    )


def b_submits_and_a_shrinks(client: TideClient, stages: Stages) -> None:
    tab = stages.page
    client.submit("b", {"name": "one", "command": ["sleep", "600"]})
    client.submit("b", {"name": "two", "command": ["sleep", "600"]})
    reclaiming = lambda: sum(s.releasing for n in client.cluster().nodes for s in n.slots) == 2  # noqa: E731
    since = api_now(reclaiming, "2 of a's GPUs being reclaimed")
    stages.seen(
        "b-submits-a-is-shrinking",
        since,
        lambda: expect(gpus(tab, project="a", state="releasing")).to_have_count(2, **MS),
        lambda: expect(gpus(tab, state="releasing").first).to_contain_text("being reclaimed"),
        lambda: expect(tab.locator('.project[data-project="a"] [data-role="releasing"]')).to_have_text(
            "⟲ 2 releasing"
        ),
        lambda: expect(job_row(tab, "b/one", "status")).to_have_text("◌ pending", **MS),
        lambda: expect(job_row(tab, "b/one", "why")).to_contain_text(
            "Waiting for 1 GPU; project b holds 0 of fair share 2"
        ),
        lambda: expect(tab.locator('#job-rows [data-role="line"]')).to_have_text(
            ["#1 in line", "#2 in line"]
        ),
        *[
            lambda text=text: expect(tab.locator("#now-body")).to_contain_text(text)
            for text in shrink_headlines(client)
        ],
        lambda: expect(tab.locator("#now-body")).to_contain_text("above its fair share of 2"),
    )


def b_runs_on_the_freed_gpus(client: TideClient, stages: Stages) -> None:
    tab = stages.page
    b_runs = lambda: replicas(client, "b", "one") == [(0, "running")] == replicas(client, "b", "two")  # noqa: E731
    since = api_now(b_runs, "b's two jobs to run")
    stages.seen(
        "b-runs-a-holds-its-quota",
        since,
        lambda: expect(gpus(tab, project="b", state="running")).to_have_count(2, **MS),
        lambda: expect(gpus(tab, project="a", state="running")).to_have_count(2, **MS),
        lambda: expect(gpus(tab, state="releasing")).to_have_count(0, **MS),
        lambda: expect(job_row(tab, "a/elastic", "replicas")).to_have_text("2 / 2 / 4", **MS),
        lambda: expect(tab.locator('.project[data-project="a"] [data-role="over-quota"]')).to_have_count(0),
    )
    tab.select_option("#filter-project", "b")
    expect(tab.locator("#job-rows tr[data-job]")).to_have_count(2)
    expect(tab.locator('#job-rows tr[data-job="a/elastic"]')).to_have_count(0)
    tab.select_option("#filter-project", "")


def b_finishes_and_a_grows_back(client: TideClient, stages: Stages) -> None:
    tab = stages.page
    client.delete_job("b", "one")
    client.delete_job("b", "two")
    since = api_now(lambda: len(replicas(client, "a", "elastic")) == 4, "a to grow back to 4")
    stages.seen(
        "b-done-a-grows-back",
        since,
        lambda: expect(job_row(tab, "a/elastic", "replicas")).to_have_text("4 / 2 / 4", **MS),
        lambda: expect(gpus(tab, project="a", state="running")).to_have_count(4, **MS),
        lambda: expect(job_row(tab, "b/one", "status")).to_have_text("⊘ cancelled", **MS),
        lambda: expect(tab.locator('#events [data-kind="grow"][data-job="a/elastic"]').first).to_contain_text(
            "a/elastic grew by", **MS
        ),
    )


def job_detail_and_logs(stages: Stages) -> None:
    tab = stages.page
    tab.click('#job-rows a[href="#job/a/elastic"]')
    tab.evaluate("window.scrollTo(0, 0)")
    detail = tab.locator("#detail")
    expect(detail.locator('[data-role="replicas"] tbody tr')).to_have_count(4)
    expect(detail.locator('tr[data-replica="0"]')).to_contain_text("★ master")
    for kind in ("start", "shrink", "grow"):
        expect(detail.locator(f'[data-kind="{kind}"]').first).to_be_visible()
    stages.seen("job-detail", None, full_page=False)  # the drawer covers the viewport
    detail.locator('[data-role="logs-link"]').click()
    expect(detail.locator('[data-role="logs"]')).to_contain_text("replica 0 of 4 on node-")
    stages.seen("master-logs", None, full_page=False)


def test_token_is_asked_once_and_again_when_refused(tide: Any, page: tuple[Page, Any], shots: Path) -> None:
    tab, console = page
    tab.goto(tide.url + "/")
    expect(tab.locator("#token-dialog")).to_be_visible()
    tab.fill("#token-input", "not-the-token")
    tab.click("#token-submit")
    expect(tab.locator("#token-error")).to_have_text("That token was refused: check it and try again.")
    tab.screenshot(path=str(shots / "token-refused.png"))
    tab.fill("#token-input", tide.token)
    tab.click("#token-submit")
    expect(tab.locator("#token-dialog")).to_be_hidden()
    expect(tab.locator("#summary")).to_contain_text("4 GPUs on 4 nodes")

    tab.reload()  # the token is kept in the browser: not asked again
    expect(tab.locator("#summary")).to_contain_text("4 GPUs on 4 nodes")
    expect(tab.locator("#token-dialog")).to_be_hidden()

    tab.evaluate("localStorage.setItem('tide.token', 'revoked-token')")
    tab.reload()  # a stored token the server refuses (401): asked again
    expect(tab.locator("#token-dialog")).to_be_visible()
    expect(tab.locator("#token-message")).to_contain_text("refused the stored token")
    assert console.errors, "the refused requests show on the console"
    assert [e for e in console.errors if "status of 401" not in e] == [], (
        "only refused requests may log errors"
    )


def test_a_bigger_cluster_gets_the_dense_gpu_map(
    serve: Callable[..., Any], page: tuple[Page, Any], shots: Path
) -> None:
    """32 GPUs on 4 nodes: replicas of 2 and 8 GPUs each show as one block; the map is dense, with a legend."""
    tab, console = page
    tide = serve(nodes=4, gpus=8)
    client = tide.client()
    client.create_department({"name": "vision", "deserved_gpus": 16})
    client.create_project({"name": "detection", "deserved_gpus": 8, "department": "vision"})
    client.create_project({"name": "llm", "deserved_gpus": 8})
    sleep = ["sleep", "600"]
    client.submit("llm", {"name": "big", "workers": 1, "gpus_per_replica": 8, "command": sleep})
    yolo = {"name": "yolo", "workers": 3, "min_replicas": 2, "max_replicas": 8, "gpus_per_replica": 2}
    client.submit("detection", {**yolo, "command": sleep})
    since = api_now(
        lambda: len(replicas(client, "llm", "big")) == 2 and len(replicas(client, "detection", "yolo")) == 8,
        "llm/big on 2 nodes and detection/yolo grown to 8 replicas",
    )
    sign_in(tab, tide)
    stages = Stages(tab, shots, first=10)
    master = gpus(tab, project="detection", job="yolo", role="master")
    stages.seen(
        "dense-map-32-gpus",
        since,
        lambda: expect(gpus(tab, state="running")).to_have_count(10, **MS),
        lambda: expect(tab.locator("#node-list")).to_have_class("nodes nodes-dense"),
        lambda: expect(master).to_have_attribute("data-gpu", re.compile(r"^node-\d/\d,\d$")),
        lambda: expect(master).to_have_attribute("style", re.compile("grid-column: span 2")),
        lambda: expect(gpus(tab, project="llm").first).to_have_attribute("style", re.compile("span 8")),
        lambda: expect(tab.locator("#gpu-legend")).to_contain_text("detection"),
        lambda: expect(tab.locator("#gpu-legend")).to_contain_text("llm"),
        lambda: expect(tab.locator('.dept[data-department=""] h3')).to_have_text("No department"),
    )
    assert console.errors == []


@pytest.mark.slow
def test_a_waiting_job_shows_when_it_should_start(
    serve: Callable[..., Any], page: tuple[Page, Any], shots: Path
) -> None:
    """a/big holds both GPUs and declared 2 hours; a/next waits: beside its place in line the page says when
    it should start, and its title says why then (the service forecasts every 30 s by default)."""
    tab, console = page
    tide = serve(nodes=1, gpus=2)
    client = tide.client()
    client.create_project({"name": "a", "deserved_gpus": 2})
    sleep = ["sleep", "600"]
    client.submit("a", {"name": "big", "workers": 1, "expected_duration": 7200, "command": sleep})
    wait_for(lambda: client.job("a", "big").status == "running", timeout=30, what="a/big to run")
    client.submit("a", {"name": "next", "command": sleep})
    wait_for(lambda: client.job("a", "next").eta is not None, timeout=60, what="an ETA for a/next")
    since = time.monotonic()
    sign_in(tab, tide)
    stages = Stages(tab, shots, first=20)
    badge = job_row(tab, "a/next", "eta")
    stages.seen(
        "eta-beside-the-place-in-line",
        since,
        lambda: expect(badge).to_have_text(re.compile(r"^starts in ~(1h 59m|2h 0m)$"), **MS),
        lambda: expect(badge).to_have_attribute(
            "title", re.compile(r"when a/big ends \(estimated from its declared")
        ),
        lambda: expect(job_row(tab, "a/next", "line")).to_have_text("#1 in line"),
    )
    tab.click('#job-rows tr[data-job="a/next"] a')
    expect(tab.locator('#detail-body [data-role="eta"]')).to_have_text(re.compile(r"^starts in ~"), **MS)
    assert console.errors == []


def test_a_project_that_borrowed_shows_its_usage_and_the_weight_it_left(
    serve: Callable[..., Any], page: tuple[Page, Any]
) -> None:
    """Fair share over time: with a 10 s usage half-life, team a borrowing 3 idle GPUs soon shows the GPU-hours
    it used above its quota and its lowered over-quota weight; team b, which borrowed nothing, shows neither."""
    tab, console = page
    tide = serve(4, 1, "--usage-half-life", "10")
    client = tide.client()
    client.create_project({"name": "a", "deserved_gpus": 1})
    client.create_project({"name": "b", "deserved_gpus": 1})
    client.submit(
        "a",
        {"name": "sweep", "workers": 3, "min_replicas": 1, "max_replicas": 4, "command": ["sleep", "600"]},
    )
    wait_for(lambda: client.project("a").effective_weight < 1.0, timeout=60, what="a's weight to drop")
    sign_in(tab, tide)
    figures = tab.locator('.project[data-project="a"] [data-role="figures"]')
    expect(figures).to_contain_text(
        re.compile(r"used [0-9.]+ GPU-h above quota lately; over-quota weight 0\.\d+ of 1"), **MS
    )
    expect(tab.locator('.project[data-project="b"] [data-role="figures"]')).not_to_contain_text("GPU-h", **MS)
    assert console.errors == []


PHONE = {"width": 390, "height": 844}

# Boxes of the parts of one GPU block (its GPU ids, the master badge, the "being reclaimed" flag, the label),
# of the block itself, and of the GPU map's panel: what a person could see overlap or stick out.
BLOCK_BOXES = """(block) => {
  const box = (el) => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const parts = [...block.querySelectorAll(".gpu-id, .master-badge, .releasing-flag, .gpu-label")]
    .filter((el) => el.getClientRects().length > 0)
    .map((el) => ({ what: el.className + ": " + el.textContent, box: box(el) }));
  return { block: box(block), panel: box(document.getElementById("gpus")), parts };
}"""


def fits_a_phone(tab: Page) -> None:
    """No sideways scrolling; each GPU block inside the map's panel, its parts inside it and apart."""
    width = tab.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"the page is {width} px wide on a {PHONE['width']} px phone"
    blocks = tab.locator("#node-list .gpu")
    assert blocks.count() > 0
    for i in range(blocks.count()):
        found = blocks.nth(i).evaluate(BLOCK_BOXES)
        bl, bt, br, bb = found["block"]
        pl, _, pr, _ = found["panel"]
        assert pl <= bl and br <= pr, f"GPU block {i} sticks out of the map's panel: {found}"
        parts = found["parts"]
        for part in parts:
            left, top, right, bottom = part["box"]
            assert bl <= left and right <= br and bt <= top and bottom <= bb, f"{part} outside its block"
        for j, one in enumerate(parts):
            for other in parts[j + 1 :]:
                a, b = one["box"], other["box"]
                apart = a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]
                assert apart, f"{one['what']!r} and {other['what']!r} overlap in GPU block {i}"


@pytest.mark.slow
def test_the_seed_scenario_on_one_node_of_4_gpus_fits_a_phone(
    serve: Callable[..., Any], page: tuple[Page, Any], shots: Path
) -> None:
    """The tour's cluster (one node of 4 GPUs) at 390 px: the map's four GPU columns fit the phone, and the
    ★ MASTER badge, the GPU ids, the "being reclaimed" flag and the label never cover each other."""
    tab, console = page
    tab.set_viewport_size(PHONE)
    tide = serve(nodes=1, gpus=4)
    client = tide.client()
    client.create_project({"name": "a", "deserved_gpus": 2})
    client.create_project({"name": "b", "deserved_gpus": 2})
    release = tide.data_dir.parent / "release"
    job = {"name": "elastic", "workers": 3, "min_replicas": 2, "max_replicas": 4}
    client.submit("a", {**job, "command": ["sh", "-c", ELASTIC], "env": {"RELEASE": str(release)}})
    since = api_now(lambda: len(replicas(client, "a", "elastic")) == 4, "a to run 4 replicas")
    sign_in(tab, tide)
    stages = Stages(tab, shots, first=11)
    master = gpus(tab, project="a", role="master")
    stages.seen(
        "phone-390-one-node-of-4-gpus",
        since,
        lambda: expect(gpus(tab, project="a", state="running")).to_have_count(4, **MS),
        lambda: expect(master.locator(".master-badge")).to_be_visible(),
        lambda: expect(master.locator(".gpu-id")).to_have_text("GPU 0"),
        lambda: fits_a_phone(tab),
    )
    client.submit("b", {"name": "one", "command": ["sleep", "600"]})
    client.submit("b", {"name": "two", "command": ["sleep", "600"]})
    reclaiming = lambda: sum(s.releasing for n in client.cluster().nodes for s in n.slots) == 2  # noqa: E731
    since = api_now(reclaiming, "2 of a's GPUs being reclaimed")
    stages.seen(
        "phone-390-a-is-shrinking",
        since,
        lambda: expect(gpus(tab, project="a", state="releasing")).to_have_count(2, **MS),
        lambda: fits_a_phone(tab),
    )
    release.touch()
    assert console.errors == []


@pytest.mark.slow
def test_a_shared_gpu_is_drawn_split_by_its_jobs(
    serve: Callable[..., Any], page: tuple[Page, Any], shots: Path
) -> None:
    """GPU fractions (R20): three 0.5 jobs on a node of 2 GPUs: one GPU split between two jobs, the other
    between one job and what is free; the node counts 2 GPUs in use."""
    tab, console = page
    tide = serve(nodes=1, gpus=2)
    client = tide.client()
    client.create_project({"name": "a", "deserved_gpus": 2})
    for name in ("nb1", "nb2", "nb3"):
        client.submit("a", {"name": name, "gpu_fraction": 0.5, "command": ["sleep", "600"]})
    since = api_now(
        lambda: all(replicas(client, "a", n) for n in ("nb1", "nb2", "nb3")), "the three halves to run"
    )
    sign_in(tab, tide)
    shared = tab.locator('#node-list .gpu[data-state="shared"]')
    Stages(tab, shots, first=40).seen(
        "shared-gpus",
        since,
        lambda: expect(shared).to_have_count(2, **MS),
        lambda: expect(tab.locator('#node-list .gpu[data-booked="1"] .gpu-part')).to_have_count(2),
        lambda: expect(tab.locator('#node-list .gpu[data-booked="0.5"] .gpu-part-free')).to_have_count(1),
        lambda: expect(tab.locator('#node-list .gpu-part[data-share="0.5"]')).to_have_count(3),
        lambda: expect(tab.locator("#node-list header")).to_contain_text("2/2 in use"),
    )
    assert console.errors == []


def test_prev_shows_the_page_asked_for_even_when_nothing_changed_or_a_late_answer_comes(
    serve: Callable[..., Any], page: tuple[Page, Any]
) -> None:
    """130 jobs on a settled cluster: Next shows rows 101-130, Prev rows 1-100 again although every answer
    for it is a 304; and a poll of page 2 still on its way when Prev is clicked does not draw over page 1."""
    tab, console = page
    tide = serve(nodes=1, gpus=1, executor="memory")
    client = tide.client()
    client.create_project({"name": "a", "deserved_gpus": 1})
    for i in range(130):
        client.submit(
            "a", {"name": f"j{i:03d}", "workers": 1, "gpus_per_replica": 1, "command": ["sleep", "600"]}
        )
    sign_in(tab, tide)
    where = tab.locator("#page-where")
    first, second = "rows 1 to 100 · page 1 of 2", "rows 101 to 130 · page 2 of 2"
    expect(where).to_have_text(first, **MS)
    unchanged_poll_is_a_304(tab)  # settled: each poll is answered 304
    tab.click("#page-next")
    expect(where).to_have_text(second, **MS)
    tab.click("#page-prev")  # page 1's answers are all 304s now: the page still redraws
    expect(where).to_have_text(first, **MS)
    expect(tab.locator("#job-rows tr[data-job]").first).to_have_attribute("data-job", "a/j000")

    tab.click("#page-next")
    expect(where).to_have_text(second, **MS)
    held: list[Any] = []  # the next poll of page 2, held on its way

    def hold(route: Any) -> None:
        held.append(route)

    tab.route(re.compile(r"/api/v1/jobs\?.*cursor="), hold)
    for _ in range(200):  # the page polls every 2 s: one comes within 10 s
        if held:
            break
        tab.wait_for_timeout(50)
    assert held, "no poll of page 2 within 10 s"
    tab.click("#page-prev")
    expect(where).to_have_text(first, **MS)
    with tab.expect_response(lambda r: "cursor=" in r.url):
        held[0].continue_()
    tab.unroute_all()
    tab.wait_for_timeout(500)  # the late answer is in the page's hands: it must be dropped, not drawn
    assert where.text_content() == first
    expect(tab.locator("#job-rows tr[data-job]").first).to_have_attribute("data-job", "a/j000")
    assert console.errors == []
