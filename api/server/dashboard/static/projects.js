// The Projects section. Contract: render(cluster, palette) draws one bar per project, grouped by
// department: GPUs held within the deserved quota (solid), held over quota (hatched, labelled), pending
// GPUs (dashed outline), the quota (solid line, label above) and the fair share (dotted line, label below),
// all on one scale (the cluster's GPUs) so bars compare; then the figures in words and one sentence on
// where the project stands. GPUs still held by replicas told to stop show as a "releasing" segment (outlined
// dashed, as in the GPU map) after what the project holds.

import { byId, h, plural, replace } from "./dom.js";
import { projectStanding } from "./words.js";

export function render(cluster, palette) {
  const releasing = releasingByProject(cluster);
  const scale = Math.max(
    1,
    cluster.total_gpus,
    ...cluster.projects.map((p) =>
      Math.max(p.allocated_gpus + (releasing.get(p.name) ?? 0) + p.pending_gpus, p.deserved_gpus, p.fair_share_gpus),
    ),
  );
  replace(byId("project-legend"), legend());
  const groups = groupByDepartment(cluster);
  if (groups.length === 0) {
    replace(byId("project-list"), h("p", { class: "muted" }, "No projects yet: an admin creates them with `tide project create`."));
    return;
  }
  replace(
    byId("project-list"),
    groups.map(({ department, projects }) =>
      h(
        "div",
        { class: "dept", dataset: { department: department?.name ?? "" } },
        groups.length > 1 || department ? h("h3", {}, department ? `Department ${department.name}` : "No department") : null,
        department ? h("p", { class: "dept-figures" }, departmentFigures(department)) : null,
        projects.map((p) => projectRow(p, releasing.get(p.name) ?? 0, scale, palette)),
      ),
    ),
  );
}

function groupByDepartment(cluster) {
  const byName = new Map(cluster.departments.map((d) => [d.name, { department: d, projects: [] }]));
  const none = { department: null, projects: [] };
  for (const project of cluster.projects) (byName.get(project.department) ?? none).projects.push(project);
  const groups = [...byName.values()].filter((g) => g.projects.length > 0);
  if (none.projects.length) groups.push(none);
  return groups;
}

// GPUs still held by replicas told to stop (physical, from the nodes): shown beside what the project holds.
function releasingByProject(cluster) {
  const byProject = new Map();
  for (const node of cluster.nodes) {
    for (const slot of node.slots) {
      if (slot.releasing) byProject.set(slot.project, (byProject.get(slot.project) ?? 0) + slot.gpu_ids.length);
    }
  }
  return byProject;
}

function departmentFigures(d) {
  const limit = d.limit_gpus === null ? "" : ` · limit ${d.limit_gpus}`;
  return `quota ${d.deserved_gpus} · fair share ${d.fair_share_gpus} · holds ${d.allocated_gpus} · pending ${d.pending_gpus}${limit}`;
}

// fair share over time: the GPU-hours held above quota (decayed), and the weight they left, when any
function usageFigures(p) {
  if (!(p.usage_gpu_hours > 0)) return "";
  const hours = p.usage_gpu_hours >= 10 ? Math.round(p.usage_gpu_hours) : +p.usage_gpu_hours.toPrecision(2);
  const lowered = p.effective_weight < p.over_quota_weight - 1e-9;
  const weight = lowered ? `; over-quota weight ${+p.effective_weight.toFixed(2)} of ${p.over_quota_weight}` : "";
  return ` · used ${hours} GPU-h above quota lately${weight}`;
}

// minimum runtime (its own or its department's): how long a job keeps its GPUs against other teams' reclaim
function runtimeFigures(p) {
  const s = p.effective_min_runtime_seconds ?? 0;
  if (!(s > 0)) return "";
  const words = s >= 3600 && s % 3600 === 0 ? `${s / 3600}h` : s >= 60 && s % 60 === 0 ? `${s / 60}m` : `${s}s`;
  return ` · min runtime ${words}`;
}

function projectRow(p, releasing, scale, palette) {
  const standing = projectStanding(p);
  const limit = p.limit_gpus === null ? "" : ` · limit ${p.limit_gpus}`;
  return h(
    "div",
    { class: "project", dataset: { project: p.name } },
    h(
      "div",
      { class: "project-head" },
      h("span", { class: "project-name chip" }, h("span", palette.paint(p.name, "dot")), p.name),
      h(
        "span",
        { class: "project-figures", dataset: { role: "figures" } },
        `holds ${p.allocated_gpus} GPUs · quota ${p.deserved_gpus} · fair share ${p.fair_share_gpus}`,
        p.over_quota_gpus > 0 ? ` · ${p.over_quota_gpus} over quota` : "",
        ` · pending ${plural(p.pending_gpus, "GPU")}${limit}`,
        releasing ? ` · ${releasing} being released` : "",
        usageFigures(p),
        runtimeFigures(p),
      ),
    ),
    bar(p, releasing, scale, palette),
    h("p", { class: standing.owed ? "explain owed" : "explain" }, standing.text),
  );
}

function bar(p, releasing, scale, palette) {
  const pct = (n) => `${(100 * n) / scale}%`;
  const label = (n, long, short) => (n / scale >= 0.25 ? long : short); // a narrow segment gets the short one
  const inQuota = Math.min(p.allocated_gpus, p.deserved_gpus);
  const over = p.allocated_gpus - inQuota;
  const segments = [];
  if (inQuota > 0) {
    const paint = palette.paint(p.name, "seg seg-in");
    segments.push(h("div", { ...paint, style: { ...paint.style, width: pct(inQuota) }, title: `${inQuota} GPUs within quota` }, h("span", {}, String(inQuota))));
  }
  if (over > 0) {
    const paint = palette.paint(p.name, "seg seg-over hatch");
    segments.push(h("div", { ...paint, style: { ...paint.style, width: pct(over) }, title: `${over} GPUs over quota`, dataset: { role: "over-quota" } }, h("span", {}, label(over, `+${over} over quota`, `+${over}`))));
  }
  if (releasing > 0) {
    const paint = palette.paint(p.name, "seg seg-releasing");
    segments.push(h("div", { ...paint, style: { ...paint.style, width: pct(releasing) }, title: `${releasing} GPUs still held by replicas that were told to stop`, dataset: { role: "releasing" } }, h("span", {}, label(releasing, `⟲ ${releasing} releasing`, `⟲${releasing}`))));
  }
  if (p.pending_gpus > 0) {
    segments.push(h("div", { class: "seg seg-pending", style: { width: pct(p.pending_gpus) }, title: `${p.pending_gpus} GPUs pending`, dataset: { role: "pending" } }, h("span", {}, label(p.pending_gpus, `${p.pending_gpus} pending`, String(p.pending_gpus)))));
  }
  return h(
    "div",
    { class: "bar-wrap", role: "img", "aria-label": `${p.name}: ${p.allocated_gpus} GPUs held (${over} over quota), quota ${p.deserved_gpus}, fair share ${p.fair_share_gpus}, ${p.pending_gpus} pending` },
    h("div", { class: "bar" }, segments),
    mark("quota", p.deserved_gpus, scale, `quota ${p.deserved_gpus}`),
    mark("share", p.fair_share_gpus, scale, `fair share ${p.fair_share_gpus}`),
  );
}

function mark(kind, value, scale, label) {
  const edge = value / scale < 0.08 ? " at-start" : value / scale > 0.92 ? " at-end" : "";
  return h("div", { class: `mark mark-${kind}${edge}`, style: { left: `${(100 * value) / scale}%` } }, h("span", {}, label));
}

function legend() {
  return [
    h("span", {}, h("span", { class: "key swatch", style: { "--c": "#7d8590" } }), " held within quota"),
    h("span", {}, h("span", { class: "key swatch hatch seg-over", style: { "--c": "#7d8590", position: "relative" } }), " held over quota (reclaimable)"),
    h("span", {}, h("span", { class: "key seg-pending", style: { border: "2px dashed #1b1f24" } }), " pending"),
    h("span", {}, "┃ quota   ┆ fair share"),
  ];
}
