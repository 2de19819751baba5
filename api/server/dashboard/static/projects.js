// The Projects section. Contract: render(cluster, palette) draws one bar per project, grouped by
// department: GPUs held within the deserved quota (solid), held over quota (hatched, labelled), pending
// GPUs (dashed outline), the quota (solid line, label above) and the fair share (dotted line, label below),
// each bar on its own project's scale (its full width is the largest of what the project holds, releases
// and waits for, its quota and its fair share), so a project of 8 GPUs on a cluster of 10,240 is still a
// readable bar; then the figures in words and one sentence on where the project stands. GPUs still held by
// replicas told to stop show as a "releasing" segment (outlined dashed, as in the GPU map) after what the
// project holds. Labels never overlap: a segment shows its long label, else its short one, only when it is
// wide enough for it (in pixels, from the bars' width that a ResizeObserver keeps), and the quota and fair
// share labels are kept inside the bar's width. The list scrolls inside the panel (at most one screen).

import { byId, h, plural, replace } from "./dom.js";
import { projectStanding } from "./words.js";

const MANY = 8; // above this many projects, a line says the list scrolls
// The bars' inner width and the root font size, in px (0: not known yet, so no segment label is drawn);
// the last cluster drawn, redrawn when either changes (a resized window, large type).
const fit = { width: 0, rem: 16, observer: null, last: null, text: null };

export function render(cluster, palette) {
  fit.last = [cluster, palette];
  watchWidth();
  const releasing = releasingByProject(cluster);
  replace(byId("project-legend"), legend());
  const groups = groupByDepartment(cluster);
  if (groups.length === 0) {
    replace(byId("project-list"), h("p", { class: "muted" }, "No projects yet: an admin creates them with `tide project create`."));
    return;
  }
  const many =
    cluster.projects.length > MANY
      ? h("p", { class: "muted small", dataset: { role: "many" } }, `${cluster.projects.length} projects${groups.length > 1 ? ` in ${groups.length} groups` : ""}: the list scrolls; Highlight in the GPU map shows where one holds GPUs.`)
      : null;
  replace(byId("project-count"), many);
  replace(
    byId("project-list"),
    groups.map(({ department, projects }) =>
      h(
        "div",
        { class: "dept", dataset: { department: department?.name ?? "" } },
        groups.length > 1 || department ? h("h3", {}, department ? `Department ${department.name}` : "No department") : null,
        department ? h("p", { class: "dept-figures" }, departmentFigures(department)) : null,
        projects.map((p) => projectRow(p, releasing.get(p.name) ?? 0, palette)),
      ),
    ),
  );
}

// Keeps fit.width (the bars' inner width: the list's content width less the bar's margins and border) and
// fit.rem; when either changes, the last cluster is drawn again at the next frame (not inside the
// observer's callback, whose redraw would resize what it observes: a "ResizeObserver loop" error).
function watchWidth() {
  if (fit.observer) return;
  fit.observer = new ResizeObserver(() => {
    const list = byId("project-list");
    const rem = parseFloat(getComputedStyle(document.documentElement).fontSize) || 16;
    const width = Math.max(0, Math.floor(list.clientWidth - 0.5 * rem - 2));
    if (width === fit.width && rem === fit.rem) return;
    Object.assign(fit, { width, rem, text: null });
    if (fit.last) requestAnimationFrame(() => render(...fit.last));
  });
  fit.observer.observe(byId("project-list"));
  fit.observer.observe(byId("project-legend")); // its height follows the font size (large type)
}

// Width in px of a label in the bars' font (size in rem, bold): measured on a canvas, no layout needed.
function textWidth(text, size) {
  if (!fit.text) {
    const family = getComputedStyle(document.documentElement).fontFamily;
    fit.text = { context: document.createElement("canvas").getContext("2d"), family, widths: new Map() };
  }
  const key = `${size}|${text}`;
  let width = fit.text.widths.get(key);
  if (width === undefined) {
    fit.text.context.font = `700 ${size * fit.rem}px ${fit.text.family}`;
    width = fit.text.context.measureText(text).width * 1.08 + 1; // a little slack for rounding and kerning
    fit.text.widths.set(key, width);
  }
  return width;
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
      if (slot.releasing) byProject.set(slot.project, (byProject.get(slot.project) ?? 0) + (slot.share ?? slot.gpu_ids.length));
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

function projectRow(p, releasing, palette) {
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
    bar(p, releasing, palette),
    h("p", { class: standing.owed ? "explain owed" : "explain" }, standing.text),
  );
}

// The project's own scale: the bar's full width in GPUs.
function scaleOf(p, releasing) {
  return Math.max(1, p.allocated_gpus + releasing + p.pending_gpus, p.deserved_gpus, p.fair_share_gpus);
}

// A segment's label: the long one when the segment is wide enough for it, else the short one, else none
// (the figures above say every number in words).
function segLabel(n, scale, long, short) {
  const px = (fit.width * n) / scale;
  const room = px - 0.6 * fit.rem - 6; // the label's padding, the segment's borders
  const said = [long, short].find((text) => textWidth(text, 0.8) <= room);
  return said ? h("span", {}, said) : null;
}

function bar(p, releasing, palette) {
  const scale = scaleOf(p, releasing);
  const pct = (n) => `${(100 * n) / scale}%`;
  const inQuota = Math.min(p.allocated_gpus, p.deserved_gpus);
  const over = p.allocated_gpus - inQuota;
  const segments = [];
  if (inQuota > 0) {
    const paint = palette.paint(p.name, "seg seg-in");
    segments.push(h("div", { ...paint, style: { ...paint.style, width: pct(inQuota) }, title: `${inQuota} GPUs within quota` }, segLabel(inQuota, scale, String(inQuota), String(inQuota))));
  }
  if (over > 0) {
    const paint = palette.paint(p.name, "seg seg-over hatch");
    segments.push(h("div", { ...paint, style: { ...paint.style, width: pct(over) }, title: `${over} GPUs over quota`, dataset: { role: "over-quota" } }, segLabel(over, scale, `+${over} over quota`, `+${over}`)));
  }
  if (releasing > 0) {
    const paint = palette.paint(p.name, "seg seg-releasing");
    segments.push(h("div", { ...paint, style: { ...paint.style, width: pct(releasing) }, title: `${releasing} GPUs still held by replicas that were told to stop`, dataset: { role: "releasing" } }, segLabel(releasing, scale, `⟲ ${releasing} releasing`, `⟲${releasing}`)));
  }
  if (p.pending_gpus > 0) {
    segments.push(h("div", { class: "seg seg-pending", style: { width: pct(p.pending_gpus) }, title: `${p.pending_gpus} GPUs pending`, dataset: { role: "pending" } }, segLabel(p.pending_gpus, scale, `${p.pending_gpus} pending`, String(p.pending_gpus))));
  }
  return h(
    "div",
    {
      class: "bar-wrap",
      role: "img",
      title: `${p.name}'s own scale: the bar's full width is ${plural(scale, "GPU")}`,
      dataset: { scale: String(scale) },
      "aria-label": `${p.name}: ${p.allocated_gpus} GPUs held (${over} over quota), quota ${p.deserved_gpus}, fair share ${p.fair_share_gpus}, ${p.pending_gpus} pending; the bar's full width is ${scale} GPUs`,
    },
    h("div", { class: "bar" }, segments),
    mark("quota", p.deserved_gpus, scale, `quota ${p.deserved_gpus}`),
    mark("share", p.fair_share_gpus, scale, `fair share ${p.fair_share_gpus}`),
  );
}

// The quota or fair share line, its label centred on it but kept inside the bar's width.
function mark(kind, value, scale, label) {
  const at = value / scale;
  if (!fit.width) {
    const edge = at < 0.08 ? " at-start" : at > 0.92 ? " at-end" : "";
    return h("div", { class: `mark mark-${kind}${edge}`, style: { left: `${100 * at}%` } }, h("span", {}, label));
  }
  const x = fit.width * at;
  const w = textWidth(label, 0.75);
  const left = Math.max(0, Math.min(fit.width - w, x - w / 2));
  return h("div", { class: `mark mark-${kind} placed`, style: { left: `${100 * at}%` } }, h("span", { style: { left: `${left - x}px` } }, label));
}

function legend() {
  return [
    h("span", {}, h("span", { class: "key swatch", style: { "--c": "#7d8590" } }), " held within quota"),
    h("span", {}, h("span", { class: "key swatch hatch seg-over", style: { "--c": "#7d8590", position: "relative" } }), " held over quota (reclaimable)"),
    h("span", {}, h("span", { class: "key seg-pending", style: { border: "2px dashed #1b1f24" } }), " pending"),
    h("span", {}, "┃ quota   ┆ fair share"),
    h("span", {}, "each bar on its project's own scale (hover a bar for it)"),
  ];
}
