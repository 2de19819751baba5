// Start-time forecasts on the page. Contract: etaBadge(job, now) is null, or a small element for a pending
// job with an ETA ("starts in ~1h 20m", by start_p90 in its title) or a running elastic job below its wanted
// size with grow_at ("grows to 4 in ~5m"); its title says whose end frees the GPUs and what that end is
// estimated from. Shown next to the place in line (jobs table, job detail). Pure: reads the API object only.

import { duration, h } from "./dom.js";

const SOURCE = {
  declared: "its declared duration",
  project: "its project's recent jobs of the same shape",
  cluster: "the cluster's recent jobs",
  default: "a default guess (no finished jobs yet)",
};

function forecast(job) {
  if (job.status === "pending" && job.eta) return { eta: job.eta, grows: false };
  if (job.status === "running" && job.grow_at) return { eta: job.grow_at, grows: true };
  return null;
}

function until(iso, now) {
  return (new Date(iso).getTime() - now) / 1000;
}

export function etaText(job, now = Date.now()) {
  const found = forecast(job);
  if (!found) return null;
  const { eta, grows } = found;
  const verb = grows ? `grows to ${eta.size}` : "starts";
  if (!eta.start_p50) return `${verb}: not within 7 days`;
  const left = until(eta.start_p50, now);
  return left < 60 ? `${verb} now` : `${verb} in ~${duration(left)}`;
}

export function etaTitle(job, now = Date.now()) {
  const found = forecast(job);
  if (!found || !found.eta.start_p50) return "";
  const { eta } = found;
  const parts = [];
  if (eta.start_p90 && eta.start_p90 !== eta.start_p50) parts.push(`most likely within ${duration(until(eta.start_p90, now))}`);
  parts.push(eta.after ? `when ${eta.after} ends (estimated from ${SOURCE[eta.source] ?? "an estimate"})` : "the GPUs it needs are free or being freed");
  return parts.join("; ");
}

export function etaBadge(job, now = Date.now()) {
  const text = etaText(job, now);
  if (!text) return null;
  return h("span", { class: "eta", dataset: { role: "eta" }, title: etaTitle(job, now) }, text);
}
