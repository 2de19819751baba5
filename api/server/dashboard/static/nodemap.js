// The compact GPU map, for clusters of more than COMPACT_ABOVE nodes. Contract: render(cluster, palette)
// draws one small cell per node, in racks of RACK nodes (in natural name order, node-2 before
// node-10), each cell a mini bar: one segment per project holding GPUs there, as tall as its share of the
// node's GPUs, in the project's colour and pattern, free GPUs grey; replicas told to stop outline the cell
// dashed red, a cordoned node is hatched grey. The title says the node's figures and who holds what;
// clicking a cell opens the node panel (its replicas with links to their jobs, and what waits to start
// there). The "Highlight" select keeps the nodes of a project or department bright and dims the others,
// without redrawing. A poll that changed /cluster redraws only the cells of nodes whose figures changed
// (all of them when the set of nodes changed); filtering only toggles classes. A rack's cells are built
// when it is in view (the racks in view at once, the others as the map scrolls to them: at 10,240 nodes
// the first render builds a few racks, not 160); the counts the page shows come from the data.
//
// Colours: a cell is about 14 px, too small for patterns, so the map shows at most MAP_COLOURS projects in
// their own colour (the page's colour for that project, see palette.js), each a distinct one: those holding
// the most GPUs, skipping a project whose colour is already shown (one shown stays while it ranks among
// the top 16, so the colours do not move about between polls). Every other project is "other" (solid
// grey). The legend above the map names each project shown, with its colour and GPUs, and counts the
// others; clicking a legend entry highlights that project's nodes.

import { byId, h, plural, replace } from "./dom.js";

export const COMPACT_ABOVE = 64;
const RACK = 64;
const byName = new Intl.Collator(undefined, { numeric: true }).compare;
const MAP_COLOURS = 8;
const OTHER = { c: "#8c959f", pattern: "other" };
const view = {
  cluster: null, palette: null, selected: null, wired: false, names: "", cells: new Map(), shown: new Map(),
  nodes: new Map(), // name -> the node as the last poll said
  racks: [], // {el, grid, names, built}
  observer: null,
};

export function render(cluster, palette) {
  Object.assign(view, { cluster, palette });
  wire();
  byId("map-tools").hidden = false;
  updateHighlight(cluster);
  const held = shownProjects(cluster, palette);
  replace(byId("gpu-legend"), legend(held, palette));
  const list = byId("node-list");
  const nodes = [...cluster.nodes].sort((a, b) => byName(a.name, b.name));
  view.nodes = new Map(nodes.map((n) => [n.name, n]));
  const names = nodes.map((n) => n.name).join(" ");
  if (list.className !== "nodes nodes-compact" || names !== view.names) {
    list.className = "nodes nodes-compact";
    view.names = names;
    view.cells = new Map();
    view.observer?.disconnect();
    view.racks = [];
    for (let i = 0; i < nodes.length; i += RACK) view.racks.push(rack(nodes.slice(i, i + RACK)));
    replace(list, view.racks.map((r) => r.el));
    buildInView(list);
  } else {
    for (const node of nodes) if (view.cells.has(node.name)) update(node, palette); // built cells that changed
  }
  applyHighlight();
  drawPanel();
}

// Builds the racks in view now (one layout to find them); the others when they scroll into view.
function buildInView(list) {
  const box = list.getBoundingClientRect();
  const bottom = Math.min(box.bottom, window.innerHeight) + 200;
  view.observer = new IntersectionObserver(
    (entries) => {
      for (const entry of entries) if (entry.isIntersecting) build(view.racks.find((r) => r.el === entry.target));
    },
    { root: list, rootMargin: "200px" },
  );
  for (const r of view.racks) {
    if (r.el.getBoundingClientRect().top < bottom) build(r);
    else view.observer.observe(r.el);
  }
}

function build(r) {
  if (!r || r.built) return;
  r.built = true;
  view.observer?.unobserve(r.el);
  replace(r.grid, r.names.map((name) => cell(view.nodes.get(name), view.palette)));
  r.el.classList.add("built");
  applyHighlight(r.grid);
  if (view.selected && r.names.includes(view.selected)) drawPanel();
}

// The projects the map colours (view.shown: name -> GPUs held), the rest "other"; what the others hold.
function shownProjects(cluster, palette) {
  const held = new Map();
  for (const node of cluster.nodes) for (const s of node.slots) held.set(s.project, (held.get(s.project) ?? 0) + (s.share ?? s.gpu_ids.length));
  const ranked = [...held].sort((a, b) => b[1] - a[1] || byName(a[0], b[0]));
  // A project shown stays shown while it ranks among the top 2 x MAP_COLOURS: a few GPUs changing hands
  // between polls neither repaints the map nor moves colours about.
  const near = new Set(ranked.slice(0, 2 * MAP_COLOURS).map(([project]) => project));
  const before = view.shown;
  const colours = new Set();
  const chosen = new Set();
  for (const keep of [true, false]) {
    for (const [project] of ranked) {
      if (chosen.size >= MAP_COLOURS) break;
      if (keep && !(before.has(project) && near.has(project))) continue;
      const colour = palette.of(project).c;
      if (chosen.has(project) || colours.has(colour)) continue;
      colours.add(colour);
      chosen.add(project);
    }
  }
  const other = { projects: 0, gpus: 0 };
  view.shown = new Map();
  for (const [project, gpus] of ranked) {
    if (chosen.has(project)) view.shown.set(project, gpus);
    else {
      other.projects += 1;
      other.gpus += gpus;
    }
  }
  return other;
}

// How the map paints a project: its own colour when shown, else the "other" grey.
function look(project, palette) {
  return view.shown.has(project) ? palette.of(project) : OTHER;
}

// What a node's cell shows: redrawn only when this changes.
function signature(node, palette) {
  const slots = node.slots.map((s) => `${s.project}:${s.gpu_ids.length}:${s.releasing ? 1 : 0}:${look(s.project, palette).c}${look(s.project, palette).pattern}`);
  return `${node.allocated_gpus}/${node.gpus}/${node.schedulable}/${node.state}/${slots.join(",")}`;
}

function update(node, palette) {
  const known = view.cells.get(node.name);
  if (known && known.sig === signature(node, palette)) return;
  const el = cell(node, palette);
  if (known?.el.classList.contains("selected")) el.classList.add("selected");
  known?.el.replaceWith(el);
}

// Back to the small views: the compact view's tools and panel go away.
export function hide() {
  view.names = "";
  view.observer?.disconnect();
  byId("map-tools").hidden = true;
  byId("node-panel").hidden = true;
  view.selected = null;
}

function wire() {
  if (view.wired) return;
  view.wired = true;
  byId("node-list").addEventListener("click", (event) => {
    const cell = event.target.closest(".ncell");
    if (!cell) return;
    view.selected = cell.dataset.node;
    drawPanel();
  });
  byId("map-filter").addEventListener("change", () => applyHighlight());
  byId("gpu-legend").addEventListener("click", (event) => {
    const entry = event.target.closest("[data-highlight]");
    if (!entry || byId("map-tools").hidden) return;
    const select = byId("map-filter");
    select.value = select.value === entry.dataset.highlight ? "" : entry.dataset.highlight;
    applyHighlight();
  });
  byId("map-tools").addEventListener("submit", (event) => event.preventDefault());
  byId("node-panel").addEventListener("click", (event) => {
    if (!event.target.closest("[data-role=close-node]")) return;
    view.selected = null;
    drawPanel();
  });
}

// A rack's frame: its label and an empty grid of its size (cells built by build()).
function rack(nodes) {
  const label = nodes.length > 1 ? `${nodes[0].name} – ${nodes[nodes.length - 1].name}` : nodes[0].name;
  const grid = h("div", { class: "rack-grid", style: { "--rows": String(Math.ceil(nodes.length / 8)) } });
  const el = h("div", { class: "rack" }, h("div", { class: "rack-label" }, label), grid);
  return { el, grid, names: nodes.map((n) => n.name), built: false };
}

function holders(node) {
  const gpus = new Map();
  let releasing = 0;
  for (const slot of node.slots) {
    gpus.set(slot.project, (gpus.get(slot.project) ?? 0) + (slot.share ?? slot.gpu_ids.length));
    if (slot.releasing) releasing += slot.share ?? slot.gpu_ids.length;
  }
  const ranked = [...gpus].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
  return { ranked, releasing };
}

function cell(node, palette) {
  const { ranked, releasing } = holders(node);
  const free = Math.max(0, node.gpus - node.allocated_gpus);
  const classes = ["ncell", node.schedulable ? "" : "ncell-cordoned", releasing ? "ncell-releasing" : "", ranked.length ? "" : "ncell-free"];
  const who = ranked.map(([project, n]) => `${project} ${n}`).join(", ");
  const title =
    `${node.name}: ${node.allocated_gpus}/${node.gpus} GPUs in use` +
    (who ? ` (${who})` : "") +
    (releasing ? `, ${releasing} being released` : "") +
    (node.schedulable ? "" : `, ${node.state}`) +
    " · click for its replicas";
  const segments = ranked.map(([project, n]) => {
    if (!view.shown.has(project)) return h("span", { class: "nseg nseg-other", style: { "flex-grow": String(n) } });
    const paint = palette.paint(project, "nseg");
    return h("span", { ...paint, style: { ...paint.style, "flex-grow": String(n) }, dataset: { project } });
  });
  if (free && ranked.length) segments.push(h("span", { class: "nseg nseg-free", style: { "flex-grow": String(free) } }));
  const el = h(
    "div",
    {
      class: classes.filter(Boolean).join(" "),
      title,
      dataset: { node: node.name, projects: ranked.map(([p]) => p).join(" "), main: ranked[0]?.[0] ?? "" },
    },
    segments,
  );
  view.cells.set(node.name, { sig: signature(node, palette), el });
  return el;
}

function updateHighlight(cluster) {
  const select = byId("map-filter");
  const current = select.value;
  const options = [h("option", { value: "" }, "all nodes")];
  if (cluster.departments.length) {
    options.push(h("optgroup", { label: "Departments" }, cluster.departments.map((d) => h("option", { value: `d:${d.name}` }, `department ${d.name}`))));
  }
  options.push(h("optgroup", { label: "Projects" }, cluster.projects.map((p) => h("option", { value: `p:${p.name}` }, p.name))));
  replace(select, options);
  const values = new Set([...select.options].map((o) => o.value));
  select.value = values.has(current) ? current : "";
}

function wanted(value) {
  if (!value) return null;
  const name = value.slice(2);
  if (value.startsWith("p:")) return new Set([name]);
  return new Set(view.cluster.projects.filter((p) => p.department === name).map((p) => p.name));
}

// Marks the cells (under ``within``: the map, or a rack just built) of nodes where the highlighted project
// or department holds GPUs, and says how many nodes those are (from the data: not every rack is built).
function applyHighlight(within = null) {
  const projects = wanted(byId("map-filter").value);
  const list = byId("node-list");
  list.classList.toggle("highlighting", projects !== null);
  for (const el of (within ?? list).querySelectorAll(".ncell")) {
    const hit = projects !== null && el.dataset.projects.split(" ").some((p) => projects.has(p));
    el.classList.toggle("hit", hit);
  }
  if (within) return;
  let hits = 0;
  if (projects !== null) for (const node of view.cluster.nodes) if (node.slots.some((s) => projects.has(s.project))) hits += 1;
  for (const entry of byId("gpu-legend").querySelectorAll("[data-highlight]")) {
    entry.setAttribute("aria-pressed", String(entry.dataset.highlight === byId("map-filter").value));
  }
  const nodes = view.cluster.nodes.length;
  const what = byId("map-filter").selectedOptions[0]?.textContent ?? "";
  replace(
    byId("map-count"),
    projects === null ? `${plural(nodes, "node")}: one cell each, click one for its replicas` : `${hits} of ${plural(nodes, "node")} hold GPUs of ${what}`,
  );
}

function drawPanel() {
  const panel = byId("node-panel");
  const node = view.selected && view.cluster?.nodes.find((n) => n.name === view.selected);
  for (const el of byId("node-list").querySelectorAll(".ncell.selected")) el.classList.remove("selected");
  if (!node) {
    panel.hidden = true;
    return;
  }
  byId("node-list").querySelector(`.ncell[data-node="${CSS.escape(node.name)}"]`)?.classList.add("selected");
  panel.hidden = false;
  replace(panel, nodePanel(node));
}

function nodePanel(node) {
  const slots = [...node.slots].sort((a, b) => Math.min(...a.gpu_ids) - Math.min(...b.gpu_ids));
  const waiting = waitingOn(node);
  return [
    h(
      "header",
      { class: "node-panel-head" },
      h("h3", {}, `Node ${node.name}`),
      h("span", {}, `${node.allocated_gpus}/${node.gpus} GPUs in use · ${node.state}${node.schedulable ? "" : " (no new replicas)"}`),
      h("button", { type: "button", dataset: { role: "close-node" }, "aria-label": `Close node ${node.name}` }, "✕ Close"),
    ),
    slots.length
      ? h(
          "table",
          { class: "node-slots" },
          h("thead", {}, h("tr", {}, ["Job", "Replica", "GPUs", "State"].map((t) => h("th", { scope: "col", class: t === "GPUs" ? "num" : null }, t)))),
          h("tbody", {}, slots.map((s) => slotRow(s))),
        )
      : h("p", { class: "muted" }, "No replica holds GPUs here."),
    waiting.length ? h("p", { class: "next-here" }, `Starting here once GPUs are free: ${waiting.join(", ")}`) : null,
  ];
}

function slotRow(slot) {
  const who = `${slot.project}/${slot.job}`;
  return h(
    "tr",
    { dataset: { project: slot.project, job: slot.job, replica: String(slot.index) } },
    h("td", {}, h("a", { href: `#job/${slot.project}/${slot.job}`, class: "chip" }, h("span", view.palette.paint(slot.project, "dot")), who)),
    h("td", {}, slot.role === "master" ? "★ master #0" : `worker #${slot.index}`),
    h("td", { class: "num" }, slot.gpu_ids.join(",")),
    h("td", {}, slot.releasing ? "⟲ being released" : "running"),
  );
}

// The replicas placed on a node that wait for their GPUs, in words (/cluster lists them with the node).
export function waitingOn(node) {
  return (node.waiting ?? []).map((w) => `${w.project}/${w.job} #${w.index}`);
}

// The compact map's legend: each project shown in its colour (a button: highlight its nodes), the others
// counted as "other", then the outlines and fills.
function legend(other, palette) {
  const entries = [...view.shown].map(([project, gpus]) =>
    h(
      "button",
      { type: "button", class: "chip legend-entry", dataset: { project, highlight: `p:${project}` }, title: `Highlight the nodes where ${project} holds GPUs` },
      h("span", palette.paint(project, "dot")),
      `${project} `,
      h("span", { class: "muted" }, `${gpus.toLocaleString("en")} GPUs`),
    ),
  );
  return [
    h("span", { class: "legend-note" }, "One cell per node, a bar per project holding its GPUs:"),
    entries,
    other.projects
      ? h(
          "span",
          { class: "chip", dataset: { role: "other" } },
          h("span", { class: "dot swatch", style: { "--c": OTHER.c } }),
          `other: ${plural(other.projects, "project")}, ${other.gpus.toLocaleString("en")} GPUs (hover a cell, or Highlight one)`,
        )
      : null,
    h("span", {}, h("span", { class: "key", style: { border: "2px dashed #a32900" } }), " ⟲ GPUs being released"),
    h("span", {}, h("span", { class: "key", style: { border: "1px solid #8c959f", background: "#eef0f3" } }), " free"),
    h("span", {}, h("span", { class: "key ncell-cordoned" }), " cordoned"),
  ];
}
