// The dashboard: polls the JSON API with the token from localStorage and draws tables and SVG plots.
"use strict";

const TOKEN_KEY = "kerneltune.token";
const JOBS_EVERY_MS = 2000;
const BOARD_EVERY_MS = 5000;
const state = { slot: null, board: [], winners: [], variantsKey: null, lastBoardJson: "", searchesPath: undefined };

const $ = (id) => document.getElementById(id);
const token = () => localStorage.getItem(TOKEN_KEY) || "";

class HttpError extends Error {
  constructor(status, detail) { super(`HTTP ${status}: ${detail}`); this.status = status; }
}

async function api(path) {
  const resp = await fetch(path, { headers: { Authorization: `Bearer ${token()}` } });
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new HttpError(resp.status, body.detail || resp.statusText);
  return body;
}

function showError(err) {
  const box = $("error");
  if (!err) { box.hidden = true; box.textContent = ""; return; }
  box.hidden = false;
  box.textContent = err.status === 401 ? "The token was refused (unknown or revoked): enter a valid read token."
    : err.status === 403 ? `This token cannot read here: ${err.message}` : `Cannot load data: ${err.message}`;
}

function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}

const num = (v, digits = 2) => (v === null || v === undefined ? "-" : Number(v).toFixed(digits));

// [3, 5, 6, 7] -> "3,5-7" (as the CLI writes batch sizes)
function spans(ms) {
  const out = [];
  for (const m of [...new Set(ms)].sort((a, b) => a - b)) {
    const last = out[out.length - 1];
    if (last && m === last[1] + 1) last[1] = m; else out.push([m, m]);
  }
  return out.map(([a, b]) => (a === b ? `${a}` : `${a}-${b}`)).join(",");
}

// --- jobs ------------------------------------------------------------------------------------------

function renderJobs(jobs) {
  const body = $("jobs").querySelector("tbody");
  body.replaceChildren();
  $("jobs-empty").hidden = jobs.length > 0;
  for (const j of jobs) {
    const tr = document.createElement("tr");
    tr.dataset.jobId = j.id;
    const p = j.progress;
    cell(tr, j.id);
    cell(tr, j.variant_id);
    cell(tr, (j.submitted_by || "-") + (j.private ? " (private)" : ""));
    cell(tr, j.queue);
    cell(tr, j.state, `state-${j.state}`);
    const td = cell(tr, "");
    const bar = document.createElement("span");
    bar.className = "bar";
    const fill = document.createElement("span");
    fill.style.width = `${p.total ? (100 * (p.done + p.cancelled)) / p.total : 0}%`;
    bar.appendChild(fill);
    td.append(bar, `${p.done}/${p.total}` + (p.running ? ` (${p.running} running)` : ""));
    cell(tr, Object.entries(p.by_verdict).map(([k, v]) => `${k} ${v}`).join(", ") || "-");
    body.appendChild(tr);
  }
  $("jobs-updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
}

async function pollJobs() {
  if (!token()) return;
  try {
    renderJobs(await api("/v1/jobs?limit=50"));
    showError(null);
  } catch (err) {
    showError(err);
  }
}

// --- leaderboard and plots ---------------------------------------------------------------------------

function slotsOf(board) {
  return [...new Set(board.map((g) => g.slot))].sort();
}

function renderSlotSelect(board) {
  const select = $("slot-select");
  const slots = slotsOf(board);
  if (!slots.includes(state.slot)) state.slot = slots[0] || null;
  const current = [...select.options].map((o) => o.value).join(",");
  if (current !== slots.join(",")) {
    select.replaceChildren(...slots.map((s) => new Option(s, s)));
  }
  if (state.slot) select.value = state.slot;
}

function renderLeaderboard(groups) {
  const body = $("leaderboard").querySelector("tbody");
  body.replaceChildren();
  $("leaderboard-empty").hidden = groups.length > 0;
  for (const g of groups) {
    for (const e of g.entries.slice(0, 5)) {
      const tr = document.createElement("tr");
      tr.className = "entry";
      cell(tr, `${g.shape_name} (${g.hardware})`);
      cell(tr, g.m);
      cell(tr, e.rank);
      cell(tr, `${e.variant_id} ${e.language}`);
      cell(tr, JSON.stringify(e.config), "config");
      cell(tr, num(e.median_us));
      cell(tr, num(e.baseline_median_us));
      cell(tr, num(e.speedup, 3), e.beats_stock ? "beats" : "");
      cell(tr, e.speedup_ci_lo === null ? "-" : `${num(e.speedup_ci_lo)}–${num(e.speedup_ci_hi)}`);
      cell(tr, e.frac_of_floor === null ? "-" : `${(100 * e.frac_of_floor).toFixed(1)}%`);
      // the bucket's incumbent timed beside this run: its time / this run's (> 1: faster), with the 95% CI
      cell(tr, e.vs_control == null ? "-" : `${num(e.vs_control, 3)}` +
        (e.vs_control_ci_lo == null ? "" : ` (${num(e.vs_control_ci_lo, 3)}–${num(e.vs_control_ci_hi, 3)})`));
      cell(tr, e.agent ? `${e.author} / ${e.agent}` : e.author);
      body.appendChild(tr);
    }
  }
}

function renderWinners(winners) {
  const body = $("winners").querySelector("tbody");
  body.replaceChildren();
  $("winners-empty").hidden = winners.length > 0;
  for (const w of winners) {
    const tr = document.createElement("tr");
    tr.dataset.bucket = `${w.shape_name} ${w.batch_bucket} ${w.hardware}`;
    const ev = w.evidence;
    cell(tr, w.shape_name);
    cell(tr, w.batch_bucket);
    cell(tr, w.hardware);
    if (w.is_stock || !ev) {
      cell(tr, "stock", "stock");
      for (let i = 0; i < 5; i++) cell(tr, "-");
    } else {
      cell(tr, `${ev.variant_id} ${ev.language}`);
      cell(tr, JSON.stringify(ev.config), "config");
      cell(tr, num(ev.median_us));
      cell(tr, num(ev.speedup, 3));
      cell(tr, spans(ev.checked_ms) || "-", "checked-m");
      cell(tr, spans(ev.unchecked_ms) || "-", ev.unchecked_ms.length ? "unchecked-m open" : "unchecked-m");
    }
    body.appendChild(tr);
  }
}

function speedupSeries(groups) {
  // One series per (variant, shape, hardware): the best config's speedup at each M.
  const series = new Map();
  for (const g of groups) {
    for (const e of g.entries) {
      if (e.speedup === null) continue;
      const key = `v${e.variant_id} ${g.shape_name}` + (g.hardware === "cpu" ? "" : ` ${g.hardware}`);
      const s = series.get(key) || new Map();
      const prev = s.get(g.m);
      if (!prev || e.speedup > prev.y) {
        s.set(g.m, { x: g.m, y: e.speedup, title: `${key} M=${g.m}: x${e.speedup.toFixed(3)} ${JSON.stringify(e.config)}` });
      }
      series.set(key, s);
    }
  }
  return [...series].map(([name, pts]) => ({ name, points: [...pts.values()] }));
}

function rooflineSeries(groups) {
  // Per shape: the HBM floor (frac_of_floor × median), stock, and the best variant, each against M.
  const byShape = new Map();
  for (const g of groups) {
    const best = g.entries[0];
    if (!best) continue;
    const s = byShape.get(g.shape_name) || { floor: [], stock: [], best: [] };
    if (best.frac_of_floor) s.floor.push({ x: g.m, y: best.frac_of_floor * best.median_us });
    if (best.baseline_median_us) s.stock.push({ x: g.m, y: best.baseline_median_us });
    s.best.push({ x: g.m, y: best.median_us });
    byShape.set(g.shape_name, s);
  }
  const out = [];
  let i = 0;
  for (const [shape, s] of byShape) {
    const color = KTCharts.PALETTE[i++ % KTCharts.PALETTE.length];
    out.push({ name: `${shape} best`, points: s.best, color });
    out.push({ name: `${shape} stock`, points: s.stock, color, dashed: true });
    out.push({ name: `${shape} floor`, points: s.floor, color: "#a0a7b4", dashed: true });
  }
  return out;
}

function renderPlots(groups) {
  KTCharts.lineChart($("speedup-chart"), {
    series: speedupSeries(groups), xLabel: "batch size M", yLabel: "speedup vs stock (x)", xLog: true,
    refY: 1, label: "speedup vs batch size", empty: "No passing runs with timings yet.",
  });
  KTCharts.lineChart($("roofline-chart"), {
    series: rooflineSeries(groups), xLabel: "batch size M", yLabel: "time (µs, log)", xLog: true, yLog: true,
    label: "time vs HBM floor", empty: "No timings with an HBM floor yet.",
  });
}

async function pollBoard() {
  if (!token()) return;
  try {
    const board = await api("/v1/leaderboard?per_group=50");
    const winners = await api("/v1/winners");
    const text = JSON.stringify([board, winners]);
    if (text !== state.lastBoardJson) {
      state.lastBoardJson = text;
      state.board = board;
      state.winners = winners;
      renderSlotSelect(board);
      redrawSlot();
    }
    await pollSearches();
    await loadVariants();
  } catch (err) {
    showError(err);
  }
}

function redrawSlot() {
  const groups = state.board.filter((g) => g.slot === state.slot);
  renderLeaderboard(groups);
  renderWinners(state.winners.filter((w) => w.slot === state.slot));
  renderPlots(groups);
}

// --- search progress (the /v1/searches API may not exist yet) -------------------------------------

async function searchesPath() {
  if (state.searchesPath === undefined) {
    // The OpenAPI document says whether this deployment serves searches: no blind 404s.
    const doc = await fetch("/openapi.json").then((r) => r.json());
    state.searchesPath = "/v1/searches" in (doc.paths || {}) ? "/v1/searches" : null;
  }
  return state.searchesPath;
}

// GET /v1/searches: one series per search target (shape at one M or one batch bucket), best-so-far
// (us) after every finished proposal, as SearchTargetOut.history reports it.
function searchSeries(search) {
  return (search.targets || []).map((t) => ({
    name: `search ${search.id} ${search.strategy} ${t.label}`,
    points: (t.history || []).filter((p) => p.best_us !== null && p.best_us !== undefined)
      .map((p) => ({ x: p.evaluations, y: p.best_us, title: `${p.evaluations} evaluations: ${p.best_us.toFixed(2)} µs` })),
  }));
}

async function pollSearches() {
  const path = await searchesPath();
  const chart = $("search-chart");
  if (!path) {
    KTCharts.lineChart(chart, { series: [], empty: "No search API on this service yet (GET /v1/searches): nothing to plot." });
    return;
  }
  const body = await api(path);
  const list = Array.isArray(body) ? body : body.searches || [];
  KTCharts.lineChart(chart, {
    series: list.flatMap(searchSeries),
    xLabel: "evaluations", yLabel: "best so far (µs)", label: "search progress",
    empty: "No search has reported results yet.",
  });
}

// --- variant diff ------------------------------------------------------------------------------------

async function loadVariants() {
  const variants = (await api("/v1/variants?limit=200")).filter((v) => v.parent_id !== null);
  const key = variants.map((v) => v.id).join(",");
  if (key === state.variantsKey) return;
  state.variantsKey = key;
  const select = $("variant-select");
  const keep = select.value;
  select.replaceChildren(...variants.map((v) => new Option(`${v.id} (parent ${v.parent_id}, ${v.author})`, v.id)));
  if (!variants.length) {
    $("diff").replaceChildren(Object.assign(document.createElement("span"), {
      className: "empty", textContent: "No variant has a parent yet: submit one with provenance.parent_id." }));
    return;
  }
  select.value = variants.some((v) => String(v.id) === keep) ? keep : String(variants[0].id);
  await showDiff();
}

async function showDiff() {
  const id = $("variant-select").value;
  if (!id) return;
  const diff = await api(`/v1/dashboard/variants/${id}/diff`);
  const pre = $("diff");
  pre.replaceChildren();
  const cls = { "+": "add", "-": "del", "@": "hunk", " ": "ctx" };
  for (const line of diff.lines) {
    const span = document.createElement("span");
    span.className = cls[line.op];
    span.textContent = line.op === "@" ? line.text : `${line.op}${line.text}`;
    pre.appendChild(span);
  }
  if (!diff.lines.length) pre.textContent = "Same source as its parent.";
}

// --- token --------------------------------------------------------------------------------------------

async function whoami() {
  if (!token()) {
    $("whoami").textContent = "no token: enter one to load data";
    return;
  }
  try {
    const me = await api("/v1/tokens/me");
    $("whoami").textContent = `${me.token.name} (${me.token.scopes.join(", ")}) · ${me.active_jobs} active jobs · `
      + `${me.gpu_seconds_today.toFixed(0)} GPU-s today`;
  } catch (err) {
    $("whoami").textContent = "token refused";
    showError(err);
  }
}

function start() {
  $("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const value = $("token-input").value.trim();
    if (value) localStorage.setItem(TOKEN_KEY, value);
    $("token-input").value = "";
    state.lastBoardJson = "";
    refresh();
  });
  $("token-clear").addEventListener("click", () => { localStorage.removeItem(TOKEN_KEY); location.reload(); });
  $("slot-select").addEventListener("change", (ev) => { state.slot = ev.target.value; redrawSlot(); });
  $("variant-select").addEventListener("change", () => showDiff().catch(showError));
  refresh();
  setInterval(pollJobs, JOBS_EVERY_MS);
  setInterval(pollBoard, BOARD_EVERY_MS);
}

function refresh() {
  whoami();
  pollJobs();
  pollBoard();
}

document.addEventListener("DOMContentLoaded", start);
