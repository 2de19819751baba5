// The GPU map. Contract: render(cluster, palette) draws every node and each of its GPUs. A replica's
// GPUs form one block (spanning as many GPU columns as it holds), painted in its project's colour and
// pattern and labelled project/job and replica; the master (replica 0, which hosts the rendezvous) is
// marked ★; a block whose replica was told to stop is outlined dashed red and flagged "being reclaimed"
// (or "stopping" when its job ended); a free GPU says "free". These are physical figures: processes that
// still hold the GPUs. Replicas placed that wait for their GPUs are listed under their node (node.waiting). Small clusters
// get large labelled cells; from DENSE_ABOVE GPUs the cells shrink to the replica number (details in the
// tooltip) with a legend of project colours, and from SWATCH_ABOVE to colour and pattern only. Above
// nodemap.COMPACT_ABOVE nodes, one cell per node instead (nodemap.js). A shared GPU (fractional replicas, each
// with its ``share`` of that one GPU) is one cell split across by its jobs, each part as wide as its share,
// and what is left of it marked free.

import { byId, h, replace } from "./dom.js";
import * as nodemap from "./nodemap.js";

const DENSE_ABOVE = 16;
const SWATCH_ABOVE = 512;

export function render(cluster, palette) {
  if (cluster.nodes.length > nodemap.COMPACT_ABOVE) {
    nodemap.render(cluster, palette); // and its legend
    return;
  }
  nodemap.hide();
  const list = byId("node-list");
  const mode = cluster.total_gpus > SWATCH_ABOVE ? "swatch" : cluster.total_gpus > DENSE_ABOVE ? "dense" : "full";
  list.className = `nodes nodes-${mode}`;
  const widest = Math.max(1, ...cluster.nodes.map((n) => n.gpus));
  list.style.setProperty("--cols", String(Math.min(widest, mode === "full" ? 4 : 8)));
  replace(byId("gpu-legend"), legend(mode === "full" ? [] : cluster.projects, palette));
  if (cluster.nodes.length === 0) {
    replace(list, h("p", { class: "muted" }, "No nodes reported yet."));
    return;
  }
  replace(list, cluster.nodes.map((node) => nodeCard(node, palette)));
}

function nodeCard(node, palette) {
  const waiting = nodemap.waitingOn(node);
  const owner = new Map();
  const shared = new Map(); // GPU id -> the fractional replicas on it
  for (const slot of node.slots) {
    for (const id of slot.gpu_ids) {
      if (slot.share == null) owner.set(id, slot);
      else shared.set(id, [...(shared.get(id) ?? []), slot]);
    }
  }
  const cells = [];
  for (let id = 0; id < node.gpus; id += 1) {
    const slot = owner.get(id);
    if (!slot && shared.has(id)) cells.push(sharedCell(node.name, id, shared.get(id), palette));
    else if (!slot) cells.push(freeCell(node.name, id));
    else if (Math.min(...slot.gpu_ids) === id) cells.push(slotCell(node.name, slot, palette));
  }
  return h(
    "section",
    { class: node.schedulable ? "node" : "node cordoned", dataset: { node: node.name }, "aria-label": `node ${node.name}` },
    h("header", {}, h("b", {}, node.name), h("span", {}, `${node.allocated_gpus}/${node.gpus} in use`, node.schedulable ? "" : " · cordoned")),
    h("div", { class: "gpu-grid" }, cells),
    waiting.length ? h("p", { class: "next-here" }, `Starting here once GPUs are free: ${waiting.join(", ")}`) : null,
  );
}

function freeCell(nodeName, id) {
  return h(
    "div",
    { class: "gpu gpu-free", dataset: { gpu: `${nodeName}/${id}`, state: "free" }, title: `${nodeName} GPU ${id}: free` },
    h("span", { class: "gpu-top" }, h("span", { class: "gpu-id" }, `GPU ${id}`)),
    h("span", { class: "gpu-label" }, "free"),
  );
}

// One GPU shared by fractional replicas: a part per replica, as wide as its share, then what is free.
function sharedCell(nodeName, id, slots, palette) {
  const booked = slots.reduce((n, s) => n + s.share, 0);
  const parts = slots.map((slot) => {
    const who = `${slot.project}/${slot.job}`;
    const stopping = slot.releasing ? releasingWords(slot.job_status ?? undefined) : null;
    const paint = palette.paint(slot.project, `gpu-part${slot.releasing ? " gpu-releasing" : ""}`);
    return h(
      "span",
      {
        ...paint,
        style: { ...paint.style, flex: `${slot.share} 1 0` },
        dataset: { project: slot.project, job: slot.job, replica: String(slot.index), share: String(slot.share) },
        title: `${nodeName} GPU ${id}: ${who} #${slot.index}, ${slot.share} of the GPU${stopping ? ` (${stopping.slice(2)})` : ""}`,
      },
      h("b", {}, who),
      h("span", { class: "gpu-role" }, `${slot.share} GPU${slot.releasing ? " ⟲" : ""}`),
    );
  });
  const free = Math.max(0, 1 - booked);
  if (free > 1e-9) parts.push(h("span", { class: "gpu-part gpu-part-free", style: { flex: `${free} 1 0` } }, "free"));
  return h(
    "div",
    {
      class: "gpu gpu-shared",
      dataset: { gpu: `${nodeName}/${id}`, state: "shared", booked: String(Math.round(booked * 1000) / 1000) },
      title: `${nodeName} GPU ${id}: shared by ${slots.length} job(s), ${Math.round(booked * 100)} % booked`,
    },
    h("span", { class: "gpu-top" }, h("span", { class: "gpu-id" }, `GPU ${id} · shared`)),
    h("span", { class: "gpu-parts" }, parts),
  );
}

// A stopping replica of a job that goes on is being reclaimed (shrink, evict); else its job ended.
function releasingWords(jobStatus) {
  if (jobStatus === "running" || jobStatus === "pending" || jobStatus === undefined) return "⟲ being reclaimed";
  return `⟲ stopping: job ${jobStatus}`;
}

function gpuRange(ids) {
  const sorted = [...ids].sort((a, b) => a - b);
  const contiguous = sorted.every((id, i) => i === 0 || id === sorted[i - 1] + 1);
  if (sorted.length === 1) return `GPU ${sorted[0]}`;
  return contiguous ? `GPUs ${sorted[0]}–${sorted[sorted.length - 1]}` : `GPUs ${sorted.join(",")}`;
}

function slotCell(nodeName, slot, palette) {
  const master = slot.role === "master";
  const who = `${slot.project}/${slot.job}`;
  const role = master ? "master #0" : `worker #${slot.index}`;
  const stopping = slot.releasing ? releasingWords(slot.job_status ?? undefined) : null;
  const paint = palette.paint(slot.project, `gpu${slot.releasing ? " gpu-releasing" : ""}${master ? " gpu-master" : ""}`);
  return h(
    "div",
    {
      ...paint,
      style: { ...paint.style, "grid-column": `span ${slot.gpu_ids.length}` },
      dataset: {
        gpu: `${nodeName}/${slot.gpu_ids.join(",")}`,
        state: slot.releasing ? "releasing" : "running",
        project: slot.project,
        job: slot.job,
        replica: String(slot.index),
        role: slot.role,
      },
      title: `${nodeName} ${gpuRange(slot.gpu_ids)}: ${who} ${role}${stopping ? ` (${stopping.slice(2)}: its process was told to stop)` : ""}`,
    },
    // the GPU ids and the master badge share a row that wraps when the block is narrow: they never overlap
    h(
      "span",
      { class: "gpu-top" },
      h("span", { class: "gpu-id" }, gpuRange(slot.gpu_ids)),
      master ? h("span", { class: "master-badge", title: "master: hosts the job's rendezvous" }, "★ MASTER") : null,
    ),
    stopping ? h("span", { class: "releasing-flag" }, stopping) : null,
    h("span", { class: "gpu-label" }, h("b", {}, who), h("span", { class: "gpu-role" }, role)),
    h("span", { class: "gpu-short" }, `${master ? "★" : ""}#${slot.index}${slot.releasing ? " ⟲" : ""}`),
  );
}

function legend(projects, palette) {
  return [
    ...projects.map((p) => h("span", { class: "chip" }, h("span", palette.paint(p.name, "dot")), p.name)),
    h("span", {}, h("span", { class: "master-badge", style: { position: "static" } }, "★ MASTER"), " replica 0"),
    h("span", {}, h("span", { class: "key", style: { border: "3px dashed #a32900" } }), " ⟲ being reclaimed"),
    h("span", {}, h("span", { class: "key", style: { border: "2px dashed #8c959f", background: "#eef0f3" } }), " free"),
  ];
}
