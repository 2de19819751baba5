// The dashboard's entry point. Contract: asks for an API token once (kept in this browser's localStorage;
// a 401 asks again), then polls every 2 s /cluster, the page of /jobs the Jobs table shows (the server pages
// it: never the whole list), the first waiting jobs in line (/jobs?waiting=true&order=line) and /events,
// each revalidated with its ETag so an unchanged state costs four 304s and no redraw. Sections redraw only when an answer changed; ages tick
// on every poll. The job detail follows the URL's #fragment. "Large type" (or ?large=1) is for wall displays.

import { Api, ApiError, Unauthorized } from "./api.js";
import * as detail from "./detail.js";
import { byId, clock, plural, replace } from "./dom.js";
import * as gpumap from "./gpumap.js";
import * as jobsView from "./jobs.js";
import { Palette } from "./palette.js";
import * as projects from "./projects.js";
import { onMoreWaiting, renderNow, renderTimeline, tickAgo, waitingWanted } from "./timeline.js";

const POLL_MS = 2000;
const EVENTS = 60;
const TOKEN_KEY = "tide.token";
const LARGE_KEY = "tide.large";

const api = new Api();
const palette = new Palette();
const state = { cluster: null, page: null, waiting: null, events: [], view: detail.route(location.hash), timer: null, polling: false, asked: 0 };
// The answers the sections were last drawn from (the Api hands back the same object while a path answers 304).
const drawn = { cluster: null, page: null, index: null, waiting: null, events: null };

function filter() {
  return { project: byId("filter-project").value, status: byId("filter-status").value };
}

function drawJobs() {
  jobsView.render(state.page, palette, filter(), detail.selectedJob(state.view));
}

// What the last redraws cost, for people and the browser tests: milliseconds from the answers being in
// hand to the page laid out (the script's work plus the layout it forces), first and latest, the last 100,
// and the script's milliseconds per section in the latest.
const renders = { first: null, last: null, count: 0, all: [], sections: {} };
window.tideRender = renders;

function timed(draw) {
  const started = performance.now();
  draw();
  void document.body.offsetHeight; // lay the page out now, so the time includes it
  const ms = performance.now() - started;
  if (renders.first === null) renders.first = ms;
  renders.last = ms;
  renders.count += 1;
  renders.all.push(Math.round(ms * 10) / 10);
  if (renders.all.length > 100) renders.all.shift();
}

// Runs one section's drawing and notes its milliseconds in tideRender.sections.
function section(name, draw) {
  const started = performance.now();
  draw();
  renders.sections[name] = Math.round((performance.now() - started) * 10) / 10;
}

function drawAll() {
  const c = state.cluster;
  renders.sections = {};
  const running = c.projects.reduce((n, p) => n + p.running_jobs, 0);
  const pending = c.projects.reduce((n, p) => n + p.pending_jobs, 0);
  replace(
    byId("summary"),
    `${plural(c.total_gpus, "GPU")} on ${plural(c.nodes.length, "node")}: ${c.allocated_gpus} in use${releasing(c)}, ${c.free_gpus} free · ` +
      `${plural(c.projects.length, "project")} · ${running} running, ${pending} pending ${pending === 1 && running === 0 ? "job" : "jobs"}`,
  );
  section("projects", () => projects.render(c, palette));
  section("gpumap", () => gpumap.render(c, palette));
  section("jobs", drawJobs);
  section("timeline", () => renderTimeline(state.events, palette));
  section("now", () => renderNow(state.events, state.waiting, palette));
}

function releasing(cluster) {
  const gpus = cluster.nodes.reduce((n, node) => n + node.slots.filter((s) => s.releasing).reduce((k, s) => k + (s.share ?? s.gpu_ids.length), 0), 0);
  return gpus ? ` (${gpus} being released)` : "";
}

function setConn(ok, text) {
  const el = byId("conn");
  el.classList.toggle("bad", !ok);
  el.textContent = text;
}

// One poll. A click or a filter may start a newer poll while this one waits for its answers: then this one's
// answers are dropped (the newer one draws and schedules), so a late answer for the page left never
// overwrites the page asked for. Sections redraw when an answer differs from the one they were drawn from,
// not merely when this poll's request got a 200: a dropped poll may have taken that 200.
async function tick() {
  state.timer = null;
  const asked = ++state.asked;
  try {
    const index = jobsView.pageIndex(); // the page asked for: a click may move on while the answers come
    const [cluster, page, waiting, events] = await Promise.all([
      api.get("/cluster"),
      api.get(jobsView.path(filter())),
      api.get(`/jobs?waiting=true&order=line&limit=${waitingWanted()}`),
      api.get(`/events?limit=${EVENTS}`),
    ]);
    if (asked !== state.asked) return;
    if (cluster.data !== drawn.cluster) {
      palette.update(cluster.data.projects);
      jobsView.updateProjectFilter(cluster.data.projects);
    }
    state.cluster = cluster.data;
    state.page = { ...page, index };
    state.waiting = { jobs: waiting.data, total: waiting.total ?? waiting.data.length };
    state.events = events.data;
    const answers = { cluster: cluster.data, page: page.data, index, waiting: waiting.data, events: events.data };
    if (Object.keys(answers).some((key) => answers[key] !== drawn[key])) {
      timed(drawAll);
      Object.assign(drawn, answers);
      detail.forget(); // the palette or the job may have changed: redraw the drawer too
    }
    await detail.refresh(api, palette, state.view);
    if (asked !== state.asked) return;
    jobsView.tickAges();
    tickAgo();
    setConn(true, `updated ${clock(new Date().toISOString())} · every ${POLL_MS / 1000} s`);
  } catch (error) {
    if (asked !== state.asked) return;
    if (error instanceof Unauthorized) {
      state.polling = false;
      localStorage.removeItem(TOKEN_KEY);
      askToken("The server refused the stored token (it may have been revoked). Enter a token.");
      return;
    }
    if (!(error instanceof ApiError)) throw error;
    setConn(false, `${error.message}; retrying every ${POLL_MS / 1000} s`);
  }
  schedule(POLL_MS);
}

function schedule(ms) {
  if (!state.polling) return;
  clearTimeout(state.timer);
  state.timer = setTimeout(tick, ms);
}

function start(token) {
  api.setToken(token);
  state.polling = true;
  schedule(0);
}

function askToken(message) {
  const dialog = byId("token-dialog");
  if (message) byId("token-message").textContent = message;
  byId("token-error").textContent = "";
  byId("token-input").value = "";
  if (!dialog.open) dialog.showModal();
  byId("token-input").focus();
}

async function submitToken(event) {
  event.preventDefault();
  const token = byId("token-input").value.trim();
  if (!token) return;
  api.setToken(token);
  try {
    await api.get("/cluster");
  } catch (error) {
    const refused = error instanceof Unauthorized;
    byId("token-error").textContent = refused ? "That token was refused: check it and try again." : error.message;
    return;
  }
  localStorage.setItem(TOKEN_KEY, token);
  byId("token-dialog").close();
  start(token);
}

function setLarge(on) {
  document.documentElement.classList.toggle("large", on);
  byId("large-type").setAttribute("aria-pressed", String(on));
  localStorage.setItem(LARGE_KEY, on ? "1" : "0");
}

function boot() {
  const params = new URLSearchParams(location.search);
  setLarge(params.has("large") ? params.get("large") !== "0" : localStorage.getItem(LARGE_KEY) === "1");
  byId("large-type").addEventListener("click", () => setLarge(!document.documentElement.classList.contains("large")));
  byId("change-token").addEventListener("click", () => {
    state.polling = false;
    clearTimeout(state.timer);
    askToken("Enter another token; it replaces the one kept in this browser.");
  });
  byId("token-form").addEventListener("submit", submitToken);
  byId("token-dialog").addEventListener("cancel", (event) => {
    if (!state.polling) event.preventDefault(); // nothing to show without a token
  });
  for (const id of ["filter-project", "filter-status"]) {
    byId(id).addEventListener("change", () => {
      jobsView.turn(0);
      if (state.polling) schedule(0); // the server pages the filtered jobs: ask it now
    });
  }
  for (const [id, delta] of [["page-prev", -1], ["page-next", 1]]) {
    byId(id).addEventListener("click", () => {
      jobsView.turn(delta);
      if (state.polling) schedule(0);
    });
  }
  byId("job-filters").addEventListener("submit", (event) => event.preventDefault());
  window.addEventListener("hashchange", () => {
    state.view = detail.route(location.hash);
    detail.forget();
    if (state.page) drawJobs();
    if (state.polling) schedule(0);
  });
  byId("detail-close").addEventListener("click", (event) => {
    event.preventDefault();
    history.pushState(null, "", location.pathname + location.search);
    window.dispatchEvent(new HashChangeEvent("hashchange"));
  });
  onMoreWaiting(() => state.polling && schedule(0)); // "Show more" waiting jobs: fetch them now
  const token = localStorage.getItem(TOKEN_KEY);
  if (token) start(token);
  else askToken();
}

boot();
