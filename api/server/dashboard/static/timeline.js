// The Timeline and the "What the scheduler just did" panel. Contract: renderTimeline(events) lists the
// latest decisions newest first, grouped by the second they were made in, each as a
// headline in plain words, the scheduler's reason, and its cause; at most TIMELINE_SHOWN decisions until
// "Show more" asks for more. renderNow(events, waiting) shows the latest decisions (the newest
// moment and those up to 3 s before it) in large type and, below it, the jobs that wait or run short of
// their wanted size with their reason and place in line (waiting: {jobs, total}, the first
// waitingWanted() of them in line as the server sends them; the first WAITING_SHOWN, "Show more" for more,
// which calls the onMoreWaiting hook to fetch them): what happened, and who is waiting and why. What
// "Show more" opened stays open across polls.

import { ago, byId, clock, h, replace } from "./dom.js";
import { CAUSE, moments, headline, kindWord, reason } from "./words.js";

export const TIMELINE_SHOWN = 6; // decisions
export const WAITING_SHOWN = 5; // jobs; the Jobs table has them all
const opened = { timeline: TIMELINE_SHOWN, waiting: WAITING_SHOWN, last: { timeline: null, now: null }, more: () => {} };

// How many waiting jobs to ask the server for; what to call when "Show more" wants more of them.
export function waitingWanted() {
  return opened.waiting;
}

export function onMoreWaiting(fetch) {
  opened.more = fetch;
}

// A "Show more" button: how many more a click shows, and how many are not shown yet.
function showMore(role, hidden, step, what, redraw) {
  const more = Math.min(hidden, step);
  return h(
    "button",
    {
      type: "button",
      class: "show-more",
      dataset: { role },
      onclick: () => {
        opened[role] += step;
        redraw();
      },
    },
    `Show ${more} more ${what} (${hidden} not shown)`,
  );
}

export function renderTimeline(events, palette) {
  opened.last.timeline = [events, palette];
  const groups = moments(events);
  if (groups.length === 0) {
    replace(byId("events"), h("li", { class: "muted" }, "No decisions yet: submit a job and watch it start here."));
    return;
  }
  const shown = [];
  let count = 0;
  for (const group of groups) {
    if (count >= opened.timeline) break;
    const taken = group.events.slice(0, opened.timeline - count); // in decision order
    shown.push({ ...group, events: taken });
    count += taken.length;
  }
  const hidden = events.length - count;
  replace(
    byId("events"),
    shown.map((group) =>
      h(
        "li",
        { class: "cycle" },
        h("span", { class: "cycle-time", dataset: { time: group.time } }, clock(group.time)),
        group.events.map((event) => eventItem(event, palette, "event")),
      ),
    ),
    hidden > 0 ? h("li", { class: "more" }, showMore("timeline", hidden, TIMELINE_SHOWN, hidden === 1 ? "decision" : "decisions", () => renderTimeline(...opened.last.timeline))) : null,
  );
}

export function eventItem(event, palette, kind) {
  const k = kindWord(event.kind);
  const cause = event.cause && event.cause !== "fair-share" ? CAUSE[event.cause] ?? event.cause : null;
  return h(
    "div",
    { class: kind, dataset: { kind: event.kind, job: `${event.project}/${event.job}`, event: String(event.id) } },
    h("span", { class: `kind kind-${event.kind}` }, `${k.symbol} ${k.word}`),
    h("span", { class: "what" }, h("span", palette.paint(event.project, "dot chip-dot")), " ", headline(event)),
    h("span", { class: "why" }, h("span", { class: "why-label" }, "Why: "), reason(event.reason), cause ? h("span", { class: "cause" }, ` (${cause})`) : null),
  );
}

// The latest burst: the newest moment and those up to BURST_S before it (b submitting two jobs is two
// cycles, a fraction of a second apart), at most BURST_EVENTS decisions (the rest are counted; the Timeline has them).
const BURST_S = 3;
const BURST_EVENTS = 6;

export function renderNow(events, waiting, palette) {
  opened.last.now = [events, waiting, palette];
  const groups = moments(events);
  const body = [];
  if (groups.length === 0) body.push(h("p", { class: "muted" }, "No decision yet."));
  let room = BURST_EVENTS;
  let left = 0;
  for (const group of groups) {
    if (groups[0].second - group.second > BURST_S) break;
    if (room <= 0) {
      left += group.events.length;
      continue;
    }
    const shown = group.events.slice(0, room); // in decision order: what was freed, then what started
    room -= shown.length;
    left += group.events.length - shown.length;
    body.push(
      h("p", { class: "now-when" }, `${clock(group.time)} · `, h("span", { dataset: { ago: group.time } }, ago(group.time))),
      h("ul", { class: "story" }, shown.map((event) => h("li", {}, eventItem(event, palette, "event-now")))),
    );
  }
  if (left) body.push(h("p", { class: "muted" }, `…and ${left} more at the same time: see the Timeline.`));
  const short = waiting.jobs; // in line, as the server sends them
  const count = Math.max(waiting.total, short.length);
  if (count) {
    body.push(
      h(
        "div",
        { class: "waiting", dataset: { role: "waiting" } },
        h("h3", {}, "Waiting, or running short of their wanted size"),
        h(
          "ul",
          {},
          short.slice(0, opened.waiting).map((j) =>
            h(
              "li",
              { dataset: { job: `${j.project}/${j.name}` } },
              j.queue_position ? h("span", { class: "line" }, `#${j.queue_position} in line`) : null,
              h("b", {}, `${j.project}/${j.name}`),
              ` (${j.status}, ${j.replicas_now} of ${j.max_replicas} replicas): `,
              reason(j.pending_reason),
            ),
          ),
        ),
        count > opened.waiting
          ? h(
              "p",
              { class: "more" },
              showMore("waiting", count - opened.waiting, 10, count - opened.waiting === 1 ? "job" : "jobs", () => opened.more()),
              h("span", { class: "muted" }, " · all of them in Jobs"),
            )
          : null,
      ),
    );
  }
  replace(byId("now-body"), body);
}

export function tickAgo() {
  for (const el of document.querySelectorAll("[data-ago]")) el.textContent = ago(el.dataset.ago);
}
