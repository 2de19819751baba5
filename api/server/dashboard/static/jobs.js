// The Jobs table. Contract: the server pages it: path(filter) is the page to poll (PAGE rows of the jobs that
// pass the project and status filter, by project then age; pending or active ones by their place in line,
// R13, then the rest by age), render(answer, palette, selected) draws that page: each row the job (a link
// to its detail), its status in words, replicas now / min / max, GPUs held, age, and for a job not at its
// wanted size the scheduler's reason, its place in line and when it should start or grow (eta.js). Above a
// page, ‹ Prev / Next › walk the pages (each page's cursor kept, so polls redraw the page shown; back to
// the first when the filter changes). tickAges() refreshes ages.

import { byId, duration, h, replace } from "./dom.js";
import { etaBadge } from "./eta.js";
import { reason, STATUS } from "./words.js";

const ORDER = { running: 0, pending: 1 };
export const PAGE = 100;
const paging = { cursors: [null], next: null }; // the cursor of each page up to the one shown

// Move by delta pages (1: on to the next, if there is one; -1: back one); 0 goes back to the first page.
export function turn(delta) {
  if (delta === 0) paging.cursors = [null];
  else if (delta < 0 && paging.cursors.length > 1) paging.cursors.pop();
  else if (delta > 0 && paging.next) paging.cursors.push(paging.next);
}

// The index of the page the table shows (the answer polled for it says which page it was asked for).
export function pageIndex() {
  return paging.cursors.length - 1;
}

export function path(filter) {
  const query = new URLSearchParams({ limit: String(PAGE) });
  if (filter.project) query.set("project", filter.project);
  if (filter.status === "active") ["pending", "running"].forEach((s) => query.append("status", s));
  else if (filter.status) query.set("status", filter.status);
  if (filter.status === "active" || filter.status === "pending") query.set("order", "line");
  const cursor = paging.cursors[paging.cursors.length - 1];
  if (cursor) query.set("cursor", cursor);
  return `/jobs?${query}`;
}

export function render(answer, palette, filter, selected) {
  const jobs = answer.data;
  const total = answer.total ?? jobs.length;
  const filtered = filter.project || filter.status;
  replace(byId("job-count"), `${total.toLocaleString("en")} ${total === 1 ? "job" : "jobs"}${filtered ? " match the filter" : ""}`);
  const current = answer.index === pageIndex(); // not an answer for the page before a click on Next/Prev
  if (current) paging.next = answer.next;
  pager(total, jobs.length, answer.index ?? pageIndex(), current);
  if (jobs.length === 0) {
    replace(byId("job-rows"), h("tr", {}, h("td", { colspan: 6, class: "muted" }, filtered ? "No job matches the filter." : "No jobs yet.")));
    return;
  }
  replace(byId("job-rows"), jobs.map((job) => row(job, palette, selected)));
}

// Shows the pager when the jobs fill more than a page.
function pager(total, shown, page, current) {
  const pages = Math.max(1, Math.ceil(total / PAGE));
  byId("job-pager").hidden = pages === 1 && page === 0;
  byId("page-prev").disabled = page === 0;
  byId("page-next").disabled = !current || !paging.next;
  const first = page * PAGE;
  const where = shown ? `rows ${(first + 1).toLocaleString("en")} to ${(first + shown).toLocaleString("en")}` : "no rows";
  replace(byId("page-where"), `${where} · page ${page + 1} of ${Math.max(pages, page + 1)}`);
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
