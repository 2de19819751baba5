// The job detail drawer. Contract: route(hash) reads "#job/PROJECT/NAME" or "#logs/PROJECT/NAME/REPLICA"
// (so a detail is a link one can share); refresh(api, palette) fetches what the open view needs (the job
// and its events, or one replica's log tail) with the same ETag revalidation as the rest of the page, and
// draws: the job's reason in large type, its figures, its replicas (role, status, node, GPU ids, pid,
// exit code, a link to each one's logs) and its events with their reasons.

import { ApiError } from "./api.js";
import { etaBadge } from "./eta.js";
import { ago, byId, clock, h, replace } from "./dom.js";
import { eventItem } from "./timeline.js";
import { moments, reason, STATUS } from "./words.js";

const LOG_TAIL = 500;

export function route(hash) {
  const parts = hash.replace(/^#/, "").split("/").map(decodeURIComponent);
  if (parts[0] === "job" && parts.length === 3) return { view: "job", project: parts[1], name: parts[2] };
  if (parts[0] === "logs" && parts.length === 4 && /^\d+$/.test(parts[3])) {
    return { view: "logs", project: parts[1], name: parts[2], replica: Number(parts[3]) };
  }
  return null;
}

export function selectedJob(view) {
  return view ? `${view.project}/${view.name}` : null;
}

export async function refresh(api, palette, view) {
  const drawer = byId("detail");
  if (!view) {
    drawer.hidden = true;
    return;
  }
  drawer.hidden = false;
  const base = `/projects/${encodeURIComponent(view.project)}/jobs/${encodeURIComponent(view.name)}`;
  try {
    const job = await api.get(base);
    if (view.view === "logs") {
      const path = `${base}/logs?replica=${view.replica}&tail=${LOG_TAIL}`;
      const logs = await api.get(path, { text: true });
      if (job.changed || logs.changed || !drawer.dataset.shown) drawLogs(view, job.data, logs.data);
    } else {
      const query = new URLSearchParams({ project: view.project, job: view.name, limit: "100" });
      const events = await api.get(`/events?${query}`);
      if (job.changed || events.changed || !drawer.dataset.shown) drawJob(job.data, events.data, palette);
    }
    drawer.dataset.shown = "1";
  } catch (error) {
    if (!(error instanceof ApiError)) throw error;
    replace(byId("detail-title"), `${view.project}/${view.name}`);
    replace(byId("detail-body"), h("p", { class: "error" }, error.message));
    delete drawer.dataset.shown;
  }
}

export function forget() {
  delete byId("detail").dataset.shown;
}

function drawJob(job, events, palette) {
  replace(byId("detail-title"), h("span", palette.paint(job.project, "dot chip-dot")), ` ${job.project}/${job.name} `, h("span", { class: `status status-${job.status}` }, STATUS[job.status] ?? job.status));
  const said = job.pending_reason ?? job.message;
  replace(
    byId("detail-body"),
    said ? h("p", { class: "reason-box", dataset: { role: "reason" } }, job.queue_position ? h("span", { class: "line" }, `#${job.queue_position} in line`) : null, etaBadge(job), reason(said)) : null,
    facts(job),
    h("h3", {}, "Replicas"),
    replicaTable(job),
    h("p", {}, h("a", { href: `#logs/${job.project}/${job.name}/0`, dataset: { role: "logs-link" } }, "Logs of the master (replica 0)")),
    h("h3", {}, "Events"),
    events.length
      ? h("ol", { class: "events" }, moments(events).map((m) => h("li", { class: "cycle" }, h("span", { class: "cycle-time" }, clock(m.time)), m.events.map((e) => eventItem(e, palette, "event")))))
      : h("p", { class: "muted" }, "No decisions about this job yet."),
  );
}

function facts(job) {
  const rows = [
    ["Replicas now / min / max", `${job.replicas_now} / ${job.min_replicas} / ${job.max_replicas}`],
    ["Allowed sizes", job.allowed_replicas ? job.allowed_replicas.join(", ") : "any"],
    ["GPUs", `${job.allocated_gpus} held; ${job.gpus_per_replica} per replica`],
    ["Kind", job.interactive ? "interactive (runs inside the quota, never evicted)" : "training (preemptible: may borrow GPUs and be shrunk)"],
    ["Priority", String(job.priority)],
    ["Restarts", String(job.restarts)],
    job.max_replicas > job.min_replicas ? ["Resize cost", resizeCost(job)] : null,
    ["Submitted", `${clock(job.created_at)} (${ago(job.created_at)})`],
    job.finished_at ? ["Finished", `${clock(job.finished_at)} (${ago(job.finished_at)})`] : null,
    ["Command", h("code", {}, job.command.join(" "))],
    job.image ? ["Image", h("code", {}, job.image)] : null,
    job.env_names.length ? ["Environment", job.env_names.join(", ")] : null,
  ].filter(Boolean);
  return h("dl", { class: "facts" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

// R18: what one resize pauses the job, as measured, else its project's default applies
function resizeCost(job) {
  if (job.resize_cost_seconds == null) return "not measured yet (its project's resize cost applies)";
  const n = job.resizes_measured;
  return `~${Math.round(job.resize_cost_seconds)} s per resize (measured over ${n} resize${n === 1 ? "" : "s"})`;
}

function replicaTable(job) {
  if (job.replicas.length === 0) return h("p", { class: "muted" }, "No replicas placed.");
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { dataset: { role: "replicas" } },
      h("thead", {}, h("tr", {}, ["#", "Role", "Status", "Node", "GPU ids", "PID", "Started", "Exit", "Logs"].map((t) => h("th", { scope: "col" }, t)))),
      h(
        "tbody",
        {},
        job.replicas.map((r) =>
          h(
            "tr",
            { dataset: { replica: String(r.index), status: r.status } },
            h("td", {}, String(r.index)),
            h("td", {}, r.role === "master" ? "★ master" : "worker"),
            h("td", {}, r.status === "terminating" ? "⟲ terminating" : r.status),
            h("td", {}, r.node),
            h("td", {}, r.gpu_ids ? r.gpu_ids.join(", ") : "–"),
            h("td", {}, r.pid ?? "–"),
            h("td", {}, r.started_at ? clock(r.started_at) : "–"),
            h("td", {}, r.exit_code ?? "–"),
            h("td", {}, r.started_at ? h("a", { href: `#logs/${job.project}/${job.name}/${r.index}` }, "logs") : "–"),
          ),
        ),
      ),
    ),
  );
}

function drawLogs(view, job, text) {
  replace(byId("detail-title"), `Logs: ${view.project}/${view.name}, replica ${view.replica}`);
  const others = job.replicas.filter((r) => r.started_at);
  replace(
    byId("detail-body"),
    h("p", {}, h("a", { href: `#job/${view.project}/${view.name}` }, "← back to the job"), others.length > 1 ? " · replica: " : "", others.length > 1 ? others.map((r) => [" ", h("a", { href: `#logs/${view.project}/${view.name}/${r.index}` }, String(r.index))]) : null),
    h("p", { class: "muted small" }, `The last ${LOG_TAIL} lines, refreshed every 2 s.`),
    h("pre", { class: "logs", dataset: { role: "logs" } }, text || "(no output yet)"),
  );
}
