// The Jobs table. Contract: render(jobs, palette, filter) lists the jobs that pass the project and status
// filter: running first, then pending in their place in line, then finished ones newest first. Each row:
// the job (a link to its detail), its status in words, replicas now / min / max, GPUs held, age, and for a
// job not at its wanted size the scheduler's reason, its place in line (R13) and when it should start or
// grow (eta.js). At most PAGE rows are drawn: above that the table pages (‹ Prev / Next ›, the page kept
// while polls redraw it, back to the first when the filter changes). tickAges() refreshes ages.

import { byId, duration, h, replace } from "./dom.js";
import { etaBadge } from "./eta.js";
import { reason, STATUS } from "./words.js";

const ORDER = { running: 0, pending: 1 };
export const PAGE = 100;
const paging = { page: 0, pages: 1 };

// Move by delta pages (clamped when the table is drawn); 0 goes back to the first page.
export function turn(delta) {
  paging.page = delta === 0 ? 0 : Math.max(0, Math.min(paging.pages - 1, paging.page + delta));
}

export function matches(job, filter) {
  if (filter.project && job.project !== filter.project) return false;
  if (filter.status === "active") return job.status === "running" || job.status === "pending";
  return !filter.status || job.status === filter.status;
}

function sortKey(a, b) {
  const ra = ORDER[a.status] ?? 2;
  const rb = ORDER[b.status] ?? 2;
  if (ra !== rb) return ra - rb;
  if (a.status === "pending") return (a.queue_position ?? 1e9) - (b.queue_position ?? 1e9);
  if (ra === 2) return (b.finished_at ?? "").localeCompare(a.finished_at ?? "");
  return a.created_at.localeCompare(b.created_at);
}

export function render(jobs, palette, filter, selected) {
  const shown = jobs.filter((job) => matches(job, filter)).sort(sortKey);
  replace(byId("job-count"), `${shown.length.toLocaleString("en")} of ${jobs.length.toLocaleString("en")} jobs`);
  const first = pager(shown.length);
  if (shown.length === 0) {
    replace(byId("job-rows"), h("tr", {}, h("td", { colspan: 6, class: "muted" }, jobs.length ? "No job matches the filter." : "No jobs yet.")));
    return;
  }
  replace(byId("job-rows"), shown.slice(first, first + PAGE).map((job) => row(job, palette, selected)));
}

// Shows the pager when the rows fill more than a page; the index of the page's first row.
function pager(count) {
  paging.pages = Math.max(1, Math.ceil(count / PAGE));
  paging.page = Math.min(paging.page, paging.pages - 1);
  const first = paging.page * PAGE;
  byId("job-pager").hidden = paging.pages === 1;
  byId("page-prev").disabled = paging.page === 0;
  byId("page-next").disabled = paging.page === paging.pages - 1;
  const last = Math.min(count, first + PAGE);
  replace(byId("page-where"), `rows ${(first + 1).toLocaleString("en")} to ${last.toLocaleString("en")} · page ${paging.page + 1} of ${paging.pages}`);
  return first;
}

function row(job, palette, selected) {
  const key = `${job.project}/${job.name}`;
  const finished = !(job.status in ORDER);
  const classes = [finished ? "finished" : "", key === selected ? "selected" : ""].join(" ").trim();
  return h(
    "tr",
    { class: classes || null, dataset: { job: key, status: job.status } },
    h(
      "td",
      { class: "job-name" },
      h("a", { href: `#job/${job.project}/${job.name}`, class: "chip" }, h("span", palette.paint(job.project, "dot")), key),
      job.interactive ? h("span", { class: "muted small" }, " · interactive") : null,
    ),
    h("td", { class: `status status-${job.status}`, dataset: { role: "status" } }, STATUS[job.status] ?? job.status),
    h(
      "td",
      { class: "replicas", dataset: { role: "replicas" }, title: "running now / min / max" },
      `${job.replicas_now} / ${job.min_replicas} / ${job.max_replicas}`,
    ),
    job.gpu_fraction == null
      ? h("td", { class: "num", dataset: { role: "gpus" }, title: `${job.gpus_per_replica} GPU(s) per replica` }, String(job.allocated_gpus))
      : h("td", { class: "num", dataset: { role: "gpus" }, title: `${job.gpu_fraction} of a GPU per replica (shared)` }, String(job.replicas_now * job.gpu_fraction)),
    h("td", { class: "num", dataset: { role: "age", created: job.created_at } }, age(job.created_at)),
    h("td", { dataset: { role: "why" } }, why(job)),
  );
}

function why(job) {
  if (job.status === "running" || job.status === "pending") {
    if (!job.pending_reason) return "";
    const line = job.queue_position ? h("span", { class: "line", dataset: { role: "line" } }, `#${job.queue_position} in line`) : null;
    return [line, etaBadge(job), reason(job.pending_reason)];
  }
  return reason(job.message ?? "");
}

function age(created) {
  return duration((Date.now() - new Date(created).getTime()) / 1000);
}

export function tickAges() {
  for (const cell of document.querySelectorAll("[data-role=age][data-created]")) {
    cell.textContent = age(cell.dataset.created);
  }
}

export function updateProjectFilter(projects) {
  const select = byId("filter-project");
  const current = select.value;
  const names = projects.map((p) => p.name);
  replace(select, h("option", { value: "" }, "all projects"), names.map((n) => h("option", { value: n }, n)));
  select.value = names.includes(current) ? current : "";
}
