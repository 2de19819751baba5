"""The dashboard at cluster scale: 10,240 nodes of 8 GPUs, 100 projects in 4 departments and beyond, 40,960 jobs.

A real ``tide serve`` with the in-memory executor (replicas are records; the loop, database and API are the
real ones): departments and projects made over REST, the jobs written through the store (``fill``), later
changes over REST. The GPU map turns compact (one cell per node, in
racks), the jobs table pages (100 rows a page), and the page says how long its redraws took
(``window.tideRender``: from the answers in hand to the page laid out). Targets: first render <= 1 s, a
poll's update <= 200 ms; on the noisy 2-core test machines the test asserts three times that and prints the
figures measured. It checks what a person does with the compact map (hover, click a node, highlight a
project or a department), pages the jobs, saves screenshots, and allows no console error.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from integration.servicekit import wait_for
from playwright.sync_api import Page, expect
from sqlalchemy import select

from api.client.rest import TideClient
from api.server import schemas
from api.server.services.jobs import new_job
from scheduler.store.db import Database, sqlite_url
from scheduler.store.models import ProjectRow

NODES, GPUS = 10_240, 8
PROJECTS, DEPARTMENTS, IN_DEPARTMENT = 100, 4, 20  # p0..p79 in d0..d3, p80..p99 in none
DESERVED = NODES * GPUS // PROJECTS // 100 * 100  # each project's quota: the cluster shared out (800 GPUs)
JOBS = 40_960
FIRST_RENDER_MS, UPDATE_MS, SLACK = 1000, 200, 3  # targets, and how far past them the test tolerates
LONG = {"timeout": 30_000}


def job_body(i: int) -> tuple[str, dict[str, Any]]:
    """Job ``i``: in project p(i mod 100); 1, 2, 4 or 8 GPUs a replica; every other one elastic."""
    gpus = (1, 2, 4, 8)[i % 4]
    workers = i % 3
    body = {"name": f"j{i}", "workers": workers, "gpus_per_replica": gpus, "command": ["train"]}
    if i % 2:
        body |= {"min_replicas": 1, "max_replicas": workers + 3}
    return f"p{i % PROJECTS}", body


def fill(tide: Any) -> float:
    """Departments and projects over REST, then JOBS jobs written through the store in one transaction: the
    submit route's own ``new_job`` from the route's own schema, into the service's database (submitting
    40,960 jobs one by one over REST takes minutes on a loaded 2-core machine; bench/live_scale.py measures
    that path). The loop picks them up at its next cycle. Seconds it took."""
    admin = tide.client()
    for d in range(DEPARTMENTS):
        admin.create_department({"name": f"d{d}", "deserved_gpus": IN_DEPARTMENT * DESERVED})
    for p in range(PROJECTS):
        department = f"d{p // IN_DEPARTMENT}" if p < DEPARTMENTS * IN_DEPARTMENT else None
        admin.create_project({"name": f"p{p}", "deserved_gpus": DESERVED, "department": department})
    started = time.monotonic()
    db = Database(sqlite_url(tide.data_dir))
    try:
        with db.write() as session:
            ids = dict(session.execute(select(ProjectRow.name, ProjectRow.id)).all())
            now = time.time()
            for i in range(JOBS):
                project, body = job_body(i)
                session.add(new_job(ids[project], schemas.JobCreate.model_validate(body), now + i * 1e-4))
    finally:
        db.dispose()
    return time.monotonic() - started


def map_shot(tab: Page, path: Path) -> None:
    """The GPU map's heading, tools and cells (its panel is as tall as the Projects beside it)."""
    top = tab.locator("#gpus").bounding_box()
    bottom = tab.locator("#node-panel:visible, #node-list").last.bounding_box()
    assert top and bottom
    clip = {
        "x": top["x"],
        "y": top["y"],
        "width": top["width"],
        "height": bottom["y"] + bottom["height"] - top["y"] + 8,
    }
    tab.screenshot(path=str(path), clip=clip, full_page=True)


def sign_in(tab: Page, tide: Any) -> None:
    tab.goto(tide.url + "/")
    tab.fill("#token-input", tide.token)
    tab.click("#token-submit")


def renders(tab: Page) -> dict[str, Any]:
    found: dict[str, Any] = tab.evaluate("({...window.tideRender})")
    return found


def wait_for_renders(tab: Page, count: int, timeout: float) -> dict[str, Any]:
    wait_for(lambda: renders(tab)["count"] >= count, timeout=timeout, what=f"{count} redraws of the page")
    return renders(tab)


@pytest.mark.slow
def test_the_dashboard_at_10240_nodes_and_40960_jobs(
    serve: Callable[..., Any], page: tuple[Page, Any], shots: Path
) -> None:
    began = time.monotonic()
    tab, console = page
    tide = serve(NODES, GPUS, "--cycle-period", "1", executor="memory")
    written_in = fill(tide)
    client = tide.client()
    sign_in(tab, tide)  # while the loop places the jobs: the page shows them waiting, then running
    expect(tab.locator("#node-list .rack")).to_have_count(NODES // 64, **LONG)

    def full() -> bool:
        try:
            return client.cluster().allocated_gpus >= 0.95 * NODES * GPUS
        except httpx.TimeoutException:  # a read while the loop writes 40,960 jobs' places: ask again
            return False

    wait_for(full, timeout=900, what="95 % of the GPUs allocated")  # 4-6 min on a loaded 2-core machine
    filled_in = time.monotonic() - began
    tab.reload()  # the first render of a full cluster
    first = wait_for_renders(tab, 1, 30)["first"]
    print(
        f"\nfirst render {first:.0f} ms, {renders(tab)['sections']}; load {Path('/proc/loadavg').read_text()}"
    )

    expect(tab.locator("#node-list")).to_have_class("nodes nodes-compact", **LONG)
    expect(tab.locator("#node-list .rack")).to_have_count(NODES // 64)
    built = tab.locator("#node-list .rack.built").count()  # the racks in view: their cells drawn
    assert 0 < built < NODES // 64 and tab.locator("#node-list .ncell").count() == 64 * built, built
    expect(tab.locator("#job-rows tr[data-job]")).to_have_count(100)
    expect(tab.locator("#job-count")).to_have_text(f"{JOBS:,} jobs")
    expect(tab.locator("#page-where")).to_have_text(f"rows 1 to 100 · page 1 of {pages(JOBS)}")
    expect(tab.locator("#summary")).to_contain_text(f"{NODES * GPUS} GPUs on {NODES} nodes")
    tab.screenshot(path=str(shots / "30-cluster-10240-nodes.png"), full_page=True)
    map_shot(tab, shots / "31-compact-gpu-map.png")
    height = readable_at_scale(tab, shots)

    updates = poll_updates(tab, client)
    print(
        f"poll updates {updates} ms, the last {renders(tab)['sections']}; load {Path('/proc/loadavg').read_text()}"
    )
    node_panel_and_highlight(tab, shots)
    jobs_pages(tab, shots)

    took = time.monotonic() - began
    print(
        f"\n{NODES:,} nodes, {JOBS:,} jobs written in {written_in:.1f} s, 95 % allocated {filled_in:.0f} s after "
        f"the start; first render {first:.0f} ms "
        f"(target {FIRST_RENDER_MS}); page {height} px tall; poll updates {updates} ms (target {UPDATE_MS}), the last by section "
        f"{renders(tab)['sections']}; whole test {took:.0f} s; load average {Path('/proc/loadavg').read_text()}"
    )
    assert console.errors == []
    assert first <= SLACK * FIRST_RENDER_MS, f"first render took {first:.0f} ms"
    # The median: a single update can stall for a second while other work has the machine's two cores.
    assert statistics.median(updates) <= SLACK * UPDATE_MS, f"poll updates took {updates} ms"


# Every visible label of the Projects section: the box of each, and what overlaps or is cut off.
LABELS = """() => {
  const box = (el) => el.getBoundingClientRect();
  const seen = (el) => el.getClientRects().length > 0 && el.textContent.trim() !== "";
  const selector = ".dept > h3, .dept-figures, .project-name, [data-role=figures], .seg > span, .mark > span, .explain";
  const labels = [...document.querySelectorAll("#project-list :is(" + selector + ")")].filter(seen);
  const what = (el) => el.closest(".project")?.dataset.project + ": " + el.textContent;
  const overlaps = [];
  const sorted = labels.map((el) => [el, box(el)]).sort((a, b) => a[1].top - b[1].top);
  for (let i = 0; i < sorted.length; i += 1) {
    const [one, a] = sorted[i];
    for (let j = i + 1; j < sorted.length && sorted[j][1].top < a.bottom; j += 1) {
      const [other, b] = sorted[j];
      if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom) {
        overlaps.push(what(one) + " | " + what(other));
      }
    }
  }
  const inside = (el, outer) => {
    const a = box(el), b = box(outer);
    return a.left >= b.left - 0.5 && a.right <= b.right + 0.5 && a.top >= b.top - 0.5 && a.bottom <= b.bottom + 0.5;
  };
  const cut = labels.filter((el) => el.matches(".seg > span") && !inside(el, el.parentElement))
    .concat(labels.filter((el) => el.matches(".mark > span") && !inside(el, el.closest(".project"))))
    .map(what);
  const segs = [...document.querySelectorAll("#project-list .seg-in")];
  return {
    labels: labels.length, overlaps: overlaps.slice(0, 5), cut: cut.slice(0, 5),
    inQuota: segs.length, inQuotaLabelled: segs.filter((s) => s.querySelector("span")).length,
    scales: [...document.querySelectorAll("#project-list .bar-wrap")].map((b) => Number(b.dataset.scale)),
  };
}"""

# The compact map's colours: each project painted in its own colour, the colour its legend entry shows.
MAP_COLOURS = """() => {
  const colour = (el) => getComputedStyle(el).backgroundColor;
  const painted = new Map();
  for (const seg of document.querySelectorAll("#node-list .nseg[data-project]")) painted.set(seg.dataset.project, colour(seg));
  const legend = new Map([...document.querySelectorAll("#gpu-legend [data-project]")]
    .map((entry) => [entry.dataset.project, colour(entry.querySelector(".dot"))]));
  return {
    painted: Object.fromEntries(painted), legend: Object.fromEntries(legend),
    others: document.querySelectorAll("#node-list .nseg-other").length,
    otherEntry: document.querySelector("#gpu-legend [data-role=other]")?.textContent ?? null,
  };
}"""
# The whole page at most 3.5 window heights, however big the cluster: measured 2.9-3.1 at 1440 x 900 (what
# "What the scheduler just did" takes depends on how many seconds its latest decisions span); 26 before.
PAGE_HEIGHTS = 3.5


def readable_at_scale(tab: Page, shots: Path) -> int:
    """The project view at 10,240 GPUs and 100 projects: bars on each project's own scale with labels that
    neither overlap nor are cut off, a legend for every project the map colours (distinct colours, the rest
    "other"), the page at most PAGE_HEIGHTS screens tall, the waiting list and the timeline capped with a
    working "Show more". Screenshots of the projects and the map's legend. The page's height in px."""
    found = tab.evaluate(LABELS)
    assert found["overlaps"] == [], f"project labels overlap: {found['overlaps']}"
    assert found["cut"] == [], f"project labels cut off: {found['cut']}"
    assert found["labels"] > 5 * PROJECTS, found["labels"]
    scales = found["scales"]  # each bar's full width in GPUs: its project's, not the cluster's 10,240
    assert max(scales) < NODES * GPUS and len(set(scales)) > 1, f"bars not on their project's scale: {scales}"
    assert found["inQuotaLabelled"] >= 0.8 * found["inQuota"] > 0, found  # the bars are readable: most say N
    tab.locator("#projects").screenshot(path=str(shots / "35-projects-each-on-its-own-scale.png"))

    colours = tab.evaluate(MAP_COLOURS)
    painted, legend = colours["painted"], colours["legend"]
    assert 0 < len(painted) <= 8 and painted == {p: legend[p] for p in painted}, colours
    assert len(set(legend.values())) == len(legend), f"two legend entries share a colour: {legend}"
    assert colours["others"] > 0 and re.match(r"other: \d+ projects, [\d,]+ GPUs", colours["otherEntry"])
    first = next(iter(legend))
    tab.locator(f'#gpu-legend [data-project="{first}"]').click()
    expect(tab.locator("#map-count")).to_have_text(
        re.compile(rf"^\d+ of {NODES} nodes hold GPUs of {first}$")
    )
    expect(tab.locator(f'#gpu-legend [data-project="{first}"]')).to_have_attribute("aria-pressed", "true")
    tab.locator("#gpus").screenshot(path=str(shots / "36-compact-map-legend.png"))
    tab.locator(f'#gpu-legend [data-project="{first}"]').click()  # again: no highlight
    expect(tab.locator("#node-list .ncell.hit")).to_have_count(0)

    viewport = tab.evaluate("window.innerHeight")
    height: int = tab.evaluate("document.documentElement.scrollHeight")
    assert height <= PAGE_HEIGHTS * viewport, f"the page is {height} px tall, {height / viewport:.1f} screens"

    waiting = tab.locator('[data-role="waiting"] li[data-job]')
    expect(waiting).to_have_count(5)
    tab.locator('button[data-role="waiting"]').click()
    expect(waiting).to_have_count(15, **LONG)  # the next poll fetches them
    events = tab.locator("#events .event")
    shown = events.count()
    assert shown == 6, shown  # timeline.js TIMELINE_SHOWN
    tab.locator('button[data-role="timeline"]').click()
    assert events.count() > shown
    return height


def poll_updates(tab: Page, client: TideClient) -> list[float]:
    """Change the state between polls (cancel a running job, submit one): each poll that sees a change redraws;
    what each redraw cost."""
    before = renders(tab)["count"]
    running = client.jobs_page(status="running", limit=5)[0]
    for i, job in enumerate(running[:4]):
        client.delete_job(job.project, job.name)
        client.submit(*job_body(JOBS + 50 + i))  # in p50..p53
        wait_for_renders(tab, before + i + 1, 90)  # a poll waits for /cluster, rebuilt after each change
    after = renders(tab)
    fresh = after["count"] - before
    return after["all"][-fresh:]


def node_panel_and_highlight(tab: Page, shots: Path) -> None:
    cell = tab.locator('#node-list .ncell[data-node="node-7"]')
    expect(cell).to_have_attribute("title", re.compile(r"^node-7: \d+/8 GPUs in use \(p\d+ \d"))
    cell.click()
    panel = tab.locator("#node-panel")
    expect(panel.locator("h3")).to_have_text("Node node-7")
    expect(panel.locator("tbody tr").first).to_contain_text(re.compile(r"p\d+/j\d+"))
    expect(panel.locator("tbody tr a").first).to_have_attribute("href", re.compile(r"^#job/p\d+/j\d+$"))
    panel.screenshot(path=str(shots / "32-node-panel.png"))

    tab.select_option("#map-filter", "p:p3")
    expect(tab.locator("#node-list")).to_have_class(re.compile("highlighting"))
    hits = tab.locator("#node-list .ncell.hit")
    expect(tab.locator("#map-count")).to_have_text(re.compile(rf"^\d+ of {NODES} nodes hold GPUs of p3$"))
    p3 = int(tab.locator("#map-count").inner_text().split()[0])  # counted from the data: every node
    assert 0 < p3 < NODES and 0 < hits.count() <= p3, (p3, hits.count())
    assert all(
        "p3" in tab.evaluate("(el) => el.dataset.projects", hits.nth(i).element_handle()).split()
        for i in range(3)
    )
    map_shot(tab, shots / "33-highlight-project-p3.png")
    tab.select_option("#map-filter", "d:d1")
    expect(tab.locator("#map-count")).to_have_text(re.compile(r"hold GPUs of department d1$"))
    assert int(tab.locator("#map-count").inner_text().split()[0]) > p3  # twenty projects: more nodes than one
    # the last rack is built once seen; scrolled to in the page, in one step: a poll's update may replace the
    # racks between a locator's finding one and scrolling it (a detached element, which Playwright refuses)
    tab.evaluate("() => [...document.querySelectorAll('#node-list .rack')].at(-1).scrollIntoView()")
    last = tab.locator(f'#node-list .ncell[data-node="node-{NODES - 1}"]')
    expect(last).to_have_count(1)
    held = set((last.get_attribute("data-projects") or "").split())
    in_d1 = {f"p{p}" for p in range(IN_DEPARTMENT, 2 * IN_DEPARTMENT)}  # p20..p39
    assert ("hit" in (last.get_attribute("class") or "").split()) == bool(held & in_d1), held  # built: marked
    tab.select_option("#map-filter", "")
    expect(tab.locator("#node-list .ncell.hit")).to_have_count(0)
    panel.locator("[data-role=close-node]").click()
    expect(panel).to_be_hidden()


def pages(jobs: int) -> int:
    return -(-jobs // 100)


def jobs_pages(tab: Page, shots: Path) -> None:
    """The server pages the table: Next and Prev walk the pages, a filter asks the server for its jobs."""
    first = tab.locator("#job-rows tr[data-job]").first.get_attribute("data-job")
    tab.click("#page-next")
    where = f"rows 101 to 200 · page 2 of {pages(JOBS + 4)}"  # 4 jobs more now (poll_updates)
    expect(tab.locator("#page-where")).to_have_text(where, **LONG)  # the next poll: /cluster may be rebuilt
    expect(tab.locator("#job-rows tr[data-job]")).to_have_count(100)
    expect(tab.locator("#job-rows tr[data-job]").first).not_to_have_attribute("data-job", first or "")
    tab.click("#page-prev")  # back on page 1 (its first row may have moved meanwhile: the line reshuffles)
    expect(tab.locator("#page-where")).to_have_text(re.compile(r"^rows 1 to 100 · page 1 of \d+$"), **LONG)
    expect(tab.locator("#job-rows tr[data-job]")).to_have_count(100)
    tab.select_option("#filter-project", "p3")
    in_p3 = len(range(3, JOBS, 100))
    expect(tab.locator("#job-count")).to_have_text(f"{in_p3} jobs match the filter", **LONG)
    expect(tab.locator("#page-where")).to_have_text(
        f"rows 1 to 100 · page 1 of {pages(in_p3)}"
    )  # back at its start
    expect(tab.locator("#job-rows tr[data-job]")).to_have_count(100)
    projects = tab.locator("#job-rows tr[data-job]").evaluate_all(
        "rows => rows.map(r => r.dataset.job.split('/')[0])"
    )
    assert set(projects) == {"p3"}, projects
    tab.select_option("#filter-project", "")
    tab.select_option("#filter-status", "pending")
    expect(tab.locator("#job-count")).to_have_text(re.compile(r"jobs? match the filter$"), **LONG)
    expect(tab.locator("#job-rows tr[data-job]").first).to_have_attribute("data-status", "pending", **LONG)
    expect(tab.locator("#page-where")).to_have_text(re.compile(r"^rows 1 to 100 · page 1 of \d+$"), **LONG)
    expect(tab.locator("#job-rows tr[data-job]").first.locator('[data-role="line"]')).to_have_text(
        re.compile(r"^#\d+ in line$")
    )
    lines = [int(t[1:].split()[0]) for t in tab.locator('#job-rows [data-role="line"]').all_text_contents()]
    assert lines == sorted(lines), lines  # the server's order: their place in line
    tab.locator("#jobs").screenshot(path=str(shots / "34-jobs-pending-page-1.png"))
