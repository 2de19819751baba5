// The GPU map. Contract: render(cluster, jobs, palette) draws every node and each of its GPUs: a GPU held
// by a replica is painted in its project's colour and pattern and labelled project/job and replica; the
// master (replica 0, which hosts the rendezvous) carries a MASTER badge; a GPU whose replica was told to stop
// (being reclaimed or released) is outlined dashed and flagged in words; a free GPU says "free". These are
// physical figures: processes that still hold the GPUs. Replicas the scheduler placed that wait for their
// GPUs to be released are listed under their node.

import { byId, h, replace } from "./dom.js";

const COMPACT_ABOVE = 96; // GPUs: beyond this the map shows swatches only (labels in the tooltip)

export function render(cluster, jobs, palette) {
  const waiting = waitingByNode(jobs);
  const list = byId("node-list");
  list.classList.toggle("compact", cluster.total_gpus > COMPACT_ABOVE);
  replace(byId("gpu-legend"), legend());
  if (cluster.nodes.length === 0) {
    replace(list, h("p", { class: "muted" }, "No nodes reported yet."));
    return;
  }
  const status = new Map(jobs.map((j) => [`${j.project}/${j.name}`, j.status]));
  replace(list, cluster.nodes.map((node) => nodeCard(node, waiting.get(node.name) ?? [], status, palette)));
}

function waitingByNode(jobs) {
  const byNode = new Map();
  for (const job of jobs) {
    if (job.status !== "running" && job.status !== "pending") continue;
    for (const r of job.replicas) {
      if (r.status !== "starting" || r.pid !== null) continue;
      if (!byNode.has(r.node)) byNode.set(r.node, []);
      byNode.get(r.node).push(`${job.project}/${job.name} #${r.index}`);
    }
  }
  return byNode;
}

function nodeCard(node, waiting, status, palette) {
  const byGpu = new Map();
  for (const slot of node.slots) for (const id of slot.gpu_ids) byGpu.set(id, slot);
  const cells = [];
  for (let id = 0; id < node.gpus; id += 1) cells.push(gpuCell(node.name, id, byGpu.get(id), status, palette));
  return h(
    "section",
    { class: node.schedulable ? "node" : "node cordoned", dataset: { node: node.name }, "aria-label": `node ${node.name}` },
    h("header", {}, h("b", {}, node.name), h("span", {}, `${node.allocated_gpus}/${node.gpus} in use`, node.schedulable ? "" : " · cordoned")),
    h("div", { class: "gpu-grid" }, cells),
    waiting.length ? h("p", { class: "next-here" }, `Starting here once GPUs are free: ${waiting.join(", ")}`) : null,
  );
}

// A stopping replica of a job that goes on is being reclaimed (shrink, evict); else its job ended.
function releasingWords(jobStatus) {
  if (jobStatus === "running" || jobStatus === "pending" || jobStatus === undefined) return "⟲ being reclaimed";
  return `stopping: job ${jobStatus}`;
}

function gpuCell(nodeName, id, slot, status, palette) {
  const where = `${nodeName} GPU ${id}`;
  if (!slot) {
    return h(
      "div",
      { class: "gpu gpu-free", dataset: { gpu: `${nodeName}/${id}`, state: "free" }, title: `${where}: free` },
      h("span", { class: "gpu-id" }, `GPU ${id}`),
      h("span", { class: "gpu-label" }, "free"),
    );
  }
  const master = slot.role === "master";
  const paint = palette.paint(slot.project, `gpu${slot.releasing ? " gpu-releasing" : ""}`);
  const state = slot.releasing ? "releasing" : "running";
  const who = `${slot.project}/${slot.job}`;
  const role = master ? "master, replica 0" : `worker, replica ${slot.index}`;
  return h(
    "div",
    {
      ...paint,
      dataset: { gpu: `${nodeName}/${id}`, state, project: slot.project, job: slot.job, replica: String(slot.index), role: slot.role },
      title: `${where}: ${who} ${role}${slot.releasing ? " (being released: its process was told to stop)" : ""}`,
    },
    h("span", { class: "gpu-id" }, `GPU ${id}`),
    master ? h("span", { class: "master-badge" }, "★ MASTER") : null,
    slot.releasing ? h("span", { class: "releasing-flag" }, releasingWords(status.get(who))) : null,
    h("span", { class: "gpu-label" }, h("b", {}, who), master ? "master #0" : `worker #${slot.index}`),
  );
}

function legend() {
  return [
    h("span", {}, h("span", { class: "key", style: { border: "2px solid #1b1f24", background: "#7d8590" } }), " held (colour + pattern = project)"),
    h("span", {}, h("span", { class: "master-badge", style: { position: "static" } }, "★ MASTER"), " replica 0"),
    h("span", {}, h("span", { class: "key", style: { border: "3px dashed #a32900" } }), " being reclaimed"),
    h("span", {}, h("span", { class: "key", style: { border: "2px dashed #8c959f", background: "#eef0f3" } }), " free"),
  ];
}
