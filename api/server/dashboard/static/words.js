// Plain words for what the scheduler did and why. Contract: pure functions of API objects; each decision
// becomes a short headline ("a/train shrank: replicas 3 and 2 stopped, the master keeps running") while the
// scheduler's own reason is shown beside it unchanged, so the page explains without second-guessing.

import { capital, plural } from "./dom.js";

export const KIND = {
  start: { symbol: "▶", word: "started" },
  grow: { symbol: "▲", word: "grew" },
  shrink: { symbol: "▼", word: "shrank" },
  evict: { symbol: "⏏", word: "evicted" },
  finish: { symbol: "✓", word: "finished" },
  fail: { symbol: "✗", word: "failed" },
  cancel: { symbol: "⊘", word: "cancelled" },
};

export const STATUS = {
  running: "● running",
  pending: "◌ pending",
  succeeded: "✓ succeeded",
  failed: "✗ failed",
  cancelled: "⊘ cancelled",
};

export const CAUSE = {
  "fair-share": "idle GPUs shared out by fair share",
  reclaim: "GPUs reclaimed for a project owed them",
  preempt: "taken for a higher-priority (or interactive) job of the same project",
  limit: "project above its GPU limit",
  quota: "interactive work above the deserved quota",
  node: "its node went away or was cordoned",
  consolidate: "moved to free a whole node",
};

export function kindWord(kind) {
  return KIND[kind] ?? { symbol: "•", word: kind };
}

function indices(list) {
  if (list.length === 0) return "";
  if (list.length === 1) return `replica ${list[0]}`;
  return `replicas ${list.slice(0, -1).join(", ")} and ${list[list.length - 1]}`;
}

export function headline(event) {
  const job = `${event.project}/${event.job}`;
  const n = event.replicas.length;
  switch (event.kind) {
    case "start":
      return `${job} started with ${plural(n, "replica")}`;
    case "grow":
      return `${job} grew by ${plural(n, "replica")} (${indices(event.replicas)})`;
    case "shrink": {
      const master = event.replicas.includes(0) ? "" : "; the master keeps running";
      return `${job} shrank: ${indices(event.replicas)} stopped${master}`;
    }
    case "evict":
      return `${job} was evicted: every replica stops; it waits in line and resumes from its checkpoint`;
    case "finish":
      return `${job} finished`;
    case "fail":
      return `${job} failed`;
    case "cancel":
      return `${job} was cancelled`;
    default:
      return `${job}: ${event.kind}`;
  }
}

export function reason(text) {
  return capital(text ?? "");
}

// Events of one scheduling cycle share a timestamp; cycles in the same second read as one moment. Group
// them by second, newest first, each group's events in the order they were decided.
export function moments(events) {
  const groups = [];
  for (const event of [...events].reverse()) {
    const second = Math.floor(new Date(event.time).getTime() / 1000);
    const last = groups[groups.length - 1];
    if (last && last.second === second) last.events.push(event);
    else groups.push({ second, time: event.time, events: [event] });
  }
  for (const group of groups) group.events.reverse();
  return groups;
}

// One sentence on where a project stands against its quota and fair share.
export function projectStanding(p) {
  const held = p.allocated_gpus;
  const owed = Math.min(p.deserved_gpus, held + p.pending_gpus) - held;
  if (owed > 0 && p.pending_gpus > 0) {
    const waiting = `${p.pending_gpus} ${p.pending_gpus === 1 ? "GPU" : "GPUs"}`;
    return { text: `Below its quota: holds ${held} of its ${p.deserved_gpus} guaranteed GPUs while jobs needing ${waiting} wait (why: see Jobs).`, owed: true };
  }
  if (held > p.fair_share_gpus && held > p.deserved_gpus) {
    return { text: `Borrowing ${plural(held - p.deserved_gpus, "GPU")} over its quota; ${plural(held - p.fair_share_gpus, "GPU")} above its fair share ${held - p.fair_share_gpus === 1 ? "is" : "are"} lent and reclaimed first when another project needs ${held - p.fair_share_gpus === 1 ? "it" : "them"}.`, owed: false };
  }
  if (held > p.deserved_gpus) {
    return { text: `Borrowing ${plural(held - p.deserved_gpus, "idle GPU")} over its quota, within its fair share of ${p.fair_share_gpus}.`, owed: false };
  }
  if (p.pending_gpus > 0 && held >= p.deserved_gpus) {
    return { text: `Its quota is in use (${held} of ${p.deserved_gpus} GPUs); jobs needing ${plural(p.pending_gpus, "GPU")} wait for idle GPUs to borrow.`, owed: false };
  }
  if (held === 0 && p.pending_gpus === 0) return { text: "Nothing running or waiting.", owed: false };
  return { text: `Within its quota (${held} of ${p.deserved_gpus} GPUs in use): guaranteed, no other project can reclaim them.`, owed: false };
}
