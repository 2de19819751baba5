// Project colours. Contract: every project gets a colour from the Okabe-Ito palette (distinguishable with
// the common forms of colour blindness) and a pattern, assigned in the order projects were created so a
// project keeps its look while others come and go; the ninth project reuses a colour with a new pattern.
// Colour is never the only cue: every coloured mark also carries the project's name or sits beside it.

const OKABE_ITO = [
  { name: "blue", c: "#0072B2", ov: "rgba(255,255,255,0.45)" },
  { name: "orange", c: "#E69F00", ov: "rgba(0,0,0,0.35)" },
  { name: "bluish green", c: "#009E73", ov: "rgba(255,255,255,0.45)" },
  { name: "reddish purple", c: "#CC79A7", ov: "rgba(0,0,0,0.35)" },
  { name: "sky blue", c: "#56B4E9", ov: "rgba(0,0,0,0.3)" },
  { name: "vermillion", c: "#D55E00", ov: "rgba(255,255,255,0.45)" },
  { name: "yellow", c: "#F0E442", ov: "rgba(0,0,0,0.35)" },
  { name: "black", c: "#000000", ov: "rgba(255,255,255,0.5)" },
];
const PATTERNS = 8;

export class Palette {
  constructor() {
    this.byProject = new Map();
  }

  // projects: the API's ProjectPublic list; called on every change of /cluster.
  update(projects) {
    const ordered = [...projects].sort(
      (a, b) => a.created_at.localeCompare(b.created_at) || a.name.localeCompare(b.name),
    );
    this.byProject = new Map(ordered.map((p, i) => [p.name, look(i)]));
  }

  of(project) {
    return this.byProject.get(project) ?? look(this.byProject.size);
  }

  // Attributes that paint an element in the project's colour and pattern.
  paint(project, extraClass = "") {
    const look = this.of(project);
    return {
      class: `swatch pat-${look.pattern} ${extraClass}`.trim(),
      style: { "--c": look.c, "--ov": look.ov },
    };
  }
}

function look(index) {
  const colour = OKABE_ITO[index % OKABE_ITO.length];
  const pattern = (index + Math.floor(index / OKABE_ITO.length)) % PATTERNS;
  return { ...colour, pattern };
}
