// weir dashboard: plain JavaScript, no build step. Pages are chosen by the URL's hash
// (#/, #/jobs/ID, #/jobs/ID/checkpoints, #/jobs/ID/operators/NAME, #/submit, #/scheduler) and
// refreshed by polling the
// REST API every second; plots are SVG drawn here.
"use strict";

const API = "/api/v1";
const POLL_MS = 1000;
const main = document.getElementById("main");
const statusEl = document.getElementById("status");

// ---------------------------------------------------------------- API access

function token() { return sessionStorage.getItem("weir-token") || ""; }

async function api(method, path, body, contentType) {
  const headers = {};
  if (token()) headers["Authorization"] = "Bearer " + token();
  if (body !== undefined) headers["Content-Type"] = contentType || "application/json";
  const res = await fetch(API + path, { method, headers, body });
  if (res.status === 401) {
    document.getElementById("token-bar").hidden = false;
  }
  const text = await res.text();
  let data;
  try { data = JSON.parse(text); } catch (_) { data = text; }
  return { status: res.status, ok: res.ok, data };
}

document.getElementById("token-save").addEventListener("click", () => {
  sessionStorage.setItem("weir-token", document.getElementById("token-input").value.trim());
  document.getElementById("token-bar").hidden = true;
  render();
});

// ---------------------------------------------------------------- formatting

function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
function num(n) { return n == null ? "–" : Math.round(n).toLocaleString("en-US"); }
function rate(n) {
  if (n == null) return "–";
  if (n >= 1e6) return (n / 1e6).toFixed(2) + "M/s";
  if (n >= 1e3) return (n / 1e3).toFixed(1) + "k/s";
  return n.toFixed(n < 10 ? 1 : 0) + "/s";
}
function dur(ms) {
  if (ms == null) return "–";
  if (ms < 1000) return ms + " ms";
  const s = ms / 1000;
  if (s < 120) return s.toFixed(1) + " s";
  const m = Math.floor(s / 60);
  if (m < 120) return m + " min " + Math.round(s % 60) + " s";
  return Math.floor(m / 60) + " h " + (m % 60) + " min";
}
function bytes(b) {
  if (b == null) return "–";
  const u = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
  return b.toFixed(i ? 1 : 0) + " " + u[i];
}
function time(ms) { return ms == null ? "–" : new Date(ms).toLocaleTimeString(); }
function us(v) {
  if (v >= 1e6) return (v / 1e6).toFixed(v >= 1e7 ? 0 : 1) + " s";
  if (v >= 1000) return (v / 1000).toFixed(v >= 1e4 ? 0 : 2) + " ms";
  return (v < 1 ? v.toFixed(1) : v.toFixed(v >= 10 ? 0 : 1)) + " µs";
}
// A watermark as a UTC time, with its lag behind the wall clock when the input keeps real time.
function watermark(j) {
  const w = j.watermark;
  if (w == null) return "–";
  const t = new Date(w).toISOString().replace("T", " ").replace("Z", "").slice(0, 19);
  const lag = j["watermark-lag-ms"];
  return lag != null && lag >= 0 && lag < 86400000 ? `${t} (${dur(lag)} behind)` : t;
}
function badge(s) { return `<span class="badge ${esc(s)}">${esc(s)}</span>`; }

// Backpressure 0..1 → green, amber, red.
function pressureColour(p) {
  const x = Math.max(0, Math.min(1, p || 0));
  const stops = [[0, [220, 252, 231]], [0.3, [254, 243, 199]], [0.7, [254, 202, 202]], [1, [248, 113, 113]]];
  for (let i = 1; i < stops.length; i++) {
    if (x <= stops[i][0]) {
      const [a, ca] = stops[i - 1], [b, cb] = stops[i];
      const t = (x - a) / (b - a);
      const c = ca.map((v, k) => Math.round(v + (cb[k] - v) * t));
      return `rgb(${c.join(",")})`;
    }
  }
  return "rgb(248,113,113)";
}

// ---------------------------------------------------------------- plots (SVG)

function sparkline(values, w = 120, h = 28, colour = "#2563eb") {
  const v = (values || []).filter(x => x != null);
  if (v.length < 2) return `<svg class="spark" width="${w}" height="${h}"></svg>`;
  const max = Math.max(...v, 1e-9);
  const step = w / (v.length - 1);
  const pts = v.map((x, i) => `${(i * step).toFixed(1)},${(h - 2 - (x / max) * (h - 4)).toFixed(1)}`);
  return `<svg class="spark" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}">
    <polygon points="0,${h} ${pts.join(" ")} ${w},${h}" fill="${colour}" fill-opacity="0.12"/>
    <polyline points="${pts.join(" ")}" fill="none" stroke="${colour}" stroke-width="1.5"/></svg>`;
}

// A line chart with axes: `series` is [{values, colour, label}], one point per `stepMs`.
function lineChart(series, { w = 640, h = 180, stepMs = 1000, format = rate } = {}) {
  const pad = { l: 64, r: 12, t: 10, b: 24 };
  const all = series.flatMap(s => s.values);
  if (all.length < 2) return `<div class="empty">Collecting samples…</div>`;
  const max = Math.max(...all, 1e-9);
  const n = Math.max(...series.map(s => s.values.length));
  const x = i => pad.l + (i / Math.max(n - 1, 1)) * (w - pad.l - pad.r);
  const y = v => pad.t + (1 - v / max) * (h - pad.t - pad.b);
  let out = `<svg width="100%" viewBox="0 0 ${w} ${h}" preserveAspectRatio="none" style="max-height:${h}px">`;
  for (let k = 0; k <= 4; k++) {
    const v = (max * k) / 4;
    out += `<line x1="${pad.l}" x2="${w - pad.r}" y1="${y(v)}" y2="${y(v)}" stroke="#e5e7eb"/>`;
    out += `<text x="${pad.l - 6}" y="${y(v) + 4}" font-size="10" text-anchor="end" fill="#64748b">${esc(format(v))}</text>`;
  }
  const span = ((n - 1) * stepMs) / 1000;
  out += `<text x="${pad.l}" y="${h - 6}" font-size="10" fill="#64748b">−${span.toFixed(0)} s</text>`;
  out += `<text x="${w - pad.r}" y="${h - 6}" font-size="10" text-anchor="end" fill="#64748b">now</text>`;
  for (const s of series) {
    const off = n - s.values.length;
    const pts = s.values.map((v, i) => `${x(i + off).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
    out += `<polyline points="${pts}" fill="none" stroke="${s.colour}" stroke-width="2"/>`;
  }
  return out + `</svg>`;
}

// Vertical bars: items [{value, colour, title}].
function barChart(items, { w = 640, h = 160, format = v => v, label = () => "" } = {}) {
  if (!items.length) return `<div class="empty">Nothing yet.</div>`;
  const pad = { l: 64, r: 8, t: 8, b: 22 };
  const max = Math.max(...items.map(i => i.value), 1e-9);
  const bw = (w - pad.l - pad.r) / items.length;
  let out = `<svg width="100%" viewBox="0 0 ${w} ${h}" style="max-height:${h}px">`;
  for (let k = 0; k <= 3; k++) {
    const v = (max * k) / 3;
    const yy = pad.t + (1 - v / max) * (h - pad.t - pad.b);
    out += `<line x1="${pad.l}" x2="${w - pad.r}" y1="${yy}" y2="${yy}" stroke="#e5e7eb"/>`;
    out += `<text x="${pad.l - 6}" y="${yy + 4}" font-size="10" text-anchor="end" fill="#64748b">${esc(format(v))}</text>`;
  }
  items.forEach((it, i) => {
    const bh = (it.value / max) * (h - pad.t - pad.b);
    const bx = pad.l + i * bw + 1;
    out += `<rect x="${bx}" y="${h - pad.b - bh}" width="${Math.max(bw - 2, 1)}" height="${Math.max(bh, 1)}" fill="${it.colour}"><title>${esc(it.title)}</title></rect>`;
    const l = label(it, i);
    if (l) out += `<text x="${bx + bw / 2}" y="${h - 8}" font-size="9" text-anchor="middle" fill="#64748b">${esc(l)}</text>`;
  });
  return out + `</svg>`;
}

// A latency histogram on a logarithmic time axis: buckets [{low-us, high-us, count}].
function histogram(buckets, { w = 640, h = 170 } = {}) {
  if (!buckets.length) return `<div class="empty">No ticks yet.</div>`;
  const pad = { l: 48, r: 12, t: 8, b: 26 };
  const lo = Math.log10(Math.max(buckets[0]["low-us"], 0.01));
  const hi = Math.log10(Math.max(buckets[buckets.length - 1]["high-us"], buckets[0]["low-us"] * 10, 0.1));
  const from = Math.floor(lo), to = Math.ceil(hi + 1e-9);
  const x = us => pad.l + ((Math.log10(Math.max(us, 0.01)) - from) / (to - from)) * (w - pad.l - pad.r);
  const max = Math.max(...buckets.map(b => b.count));
  const y = c => pad.t + (1 - c / max) * (h - pad.t - pad.b);
  let out = `<svg width="100%" viewBox="0 0 ${w} ${h}" style="max-height:${h}px">`;
  const ticks = [...new Set([0, Math.round(max / 2), max])];
  for (const c of ticks) {
    out += `<line x1="${pad.l}" x2="${w - pad.r}" y1="${y(c)}" y2="${y(c)}" stroke="#e5e7eb"/>`;
    out += `<text x="${pad.l - 6}" y="${y(c) + 4}" font-size="10" text-anchor="end" fill="#64748b">${c}</text>`;
  }
  for (let d = from; d <= to; d++) {
    const v = Math.pow(10, d);
    out += `<line x1="${x(v)}" x2="${x(v)}" y1="${pad.t}" y2="${h - pad.b}" stroke="#f1f5f9"/>`;
    out += `<text x="${x(v)}" y="${h - 8}" font-size="10" text-anchor="middle" fill="#64748b">${esc(us(v))}</text>`;
  }
  for (const b of buckets) {
    const x1 = x(b["low-us"]), x2 = Math.max(x(b["high-us"] + 0.001), x1 + 2);
    out += `<rect x="${x1}" y="${y(b.count)}" width="${x2 - x1}" height="${h - pad.b - y(b.count)}" fill="#0d9488"><title>${esc(us(b["low-us"]))}–${esc(us(b["high-us"]))}: ${b.count} ticks</title></rect>`;
  }
  return out + `</svg>`;
}

// The DAG, layered left to right by longest path from a source.
function dagSvg(job) {
  const nodes = job.nodes, edges = job.edges;
  const layer = nodes.map(() => 0);
  for (let pass = 0; pass < nodes.length; pass++) {
    for (const e of edges) layer[e.to] = Math.max(layer[e.to], layer[e.from] + 1);
  }
  const columns = [];
  nodes.forEach((n, i) => (columns[layer[i]] ||= []).push(i));
  const W = 210, H = 92, GX = 92, GY = 26;
  const rows = Math.max(...columns.map(c => c.length));
  const width = columns.length * (W + GX) - GX + 20;
  const height = rows * (H + GY) - GY + 20;
  const pos = [];
  columns.forEach((col, c) => col.forEach((i, r) => {
    const offset = ((rows - col.length) * (H + GY)) / 2;
    pos[i] = { x: 10 + c * (W + GX), y: 10 + offset + r * (H + GY) };
  }));
  let out = `<svg width="${width}" viewBox="0 0 ${width} ${height}" style="max-width:100%;height:auto">
    <defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto">
    <path d="M0,0 L10,5 L0,10 z" fill="#94a3b8"/></marker></defs>`;
  for (const e of edges) {
    const a = pos[e.from], b = pos[e.to];
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x - 2, y2 = b.y + H / 2, mx = (x1 + x2) / 2;
    out += `<path class="edge ${esc(e.partitioning)}" d="M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}" marker-end="url(#arrow)"/>`;
    const lbl = [e.port, e.partitioning].filter(Boolean).join(" · ");
    out += `<text class="edge-label" x="${mx}" y="${(y1 + y2) / 2 - 5}" text-anchor="middle">${esc(lbl)}</text>`;
  }
  nodes.forEach((n, i) => {
    const p = pos[i];
    const r = n.role === "source" ? n["rate-out"] : n["rate-in"];
    const hist = n.role === "source" ? n.history["rate-out"] : n.history["rate-in"];
    const lag = n["watermark-delay-ms"];
    out += `<g class="node" transform="translate(${p.x},${p.y})"><title>${esc(n.name)}: backpressure ${(100 * n.backpressure).toFixed(0)}%</title>
      <rect class="box" width="${W}" height="${H}" rx="8" fill="${pressureColour(n.backpressure)}"/>
      <text class="name" x="10" y="19">${esc(n.name)}</text>
      <text class="meta" x="${W - 10}" y="19" text-anchor="end">${esc(n.kind)} ×${n.parallelism}</text>
      <text class="meta" x="10" y="36">${esc(rate(r))} · bp ${(100 * n.backpressure).toFixed(0)}%${lag != null ? " · wm −" + esc(dur(lag)) : ""}</text>
      <g transform="translate(10,44)">${sparkline(hist, W - 20, 38, "#1e40af")}</g></g>`;
  });
  return out + `</svg>`;
}

// ---------------------------------------------------------------- pages

let page = null; // { key, refresh }

function setStatus(ok, text) {
  statusEl.textContent = text;
  statusEl.className = "status" + (ok ? "" : " error");
}

async function refresh() {
  if (!page) return;
  try {
    await page.refresh();
    setStatus(true, "live · " + new Date().toLocaleTimeString());
  } catch (e) {
    setStatus(false, "cannot reach the server: " + e.message);
  }
}

function show(key, html, refreshFn) {
  main.innerHTML = html;
  page = { key, refresh: refreshFn || (async () => {}) };
  refresh();
}

async function jobsPage() {
  show("jobs", `<h1>Jobs</h1><div class="panel"><div id="jobs"></div></div>`, async () => {
    const r = await api("GET", "/jobs");
    if (!r.ok) throw new Error(r.data.error || r.status);
    const jobs = r.data.jobs;
    const el = document.getElementById("jobs");
    if (!el) return;
    if (!jobs.length) {
      el.innerHTML = `<div class="empty">No jobs yet. <a href="#/submit">Submit one</a> or run <code>weir submit JOB.yaml</code>.</div>`;
      return;
    }
    el.innerHTML = `<table><thead><tr><th>id</th><th>name</th><th>state</th><th class="num">events</th>
      <th class="num">events/s</th><th>throughput</th><th class="num">watermark</th><th class="num">duration</th></tr></thead><tbody>
      ${jobs.slice().reverse().map(j => `<tr class="link" data-id="${esc(j.id)}"><td>${esc(j.id)}</td>
        <td><b>${esc(j.name)}</b><div class="muted">${esc(j.description || "")}</div></td><td>${badge(j.state)}</td>
        <td class="num">${num(j.events)}</td><td class="num">${rate(j["events-per-second"])}</td>
        <td>${sparkline(j.throughput, 140, 28)}</td>
        <td class="num">${watermark(j)}</td><td class="num">${dur(j["duration-ms"])}</td></tr>`).join("")}
      </tbody></table>`;
    el.querySelectorAll("tr.link").forEach(tr => tr.addEventListener("click", () => { location.hash = "#/jobs/" + tr.dataset.id; }));
  });
}

function jobHeader(job, tab) {
  const live = ["running", "restarting", "cancelling", "stopping"].includes(job.state);
  const id = esc(job.id);
  return `<h1>${esc(job.name)} ${badge(job.state)} <span class="muted" style="font-size:13px;font-weight:400">job ${id} · run ${job.run}</span></h1>
    <div class="actions">
      <button id="act-savepoint" ${live && job.checkpointing ? "" : "disabled"}>Savepoint</button>
      <button id="act-stop" ${live && job.checkpointing ? "" : "disabled"}>Stop with savepoint</button>
      <button id="act-cancel" class="danger" ${live ? "" : "disabled"}>Cancel</button>
      <span style="margin-left:12px"></span>
      <select id="restart-from" ${live ? "disabled" : ""}><option value="">from scratch</option><option value="latest">latest snapshot</option></select>
      <button id="act-restart" ${live ? "disabled" : ""}>Restart</button>
      <span style="margin-left:12px"></span>
      <input id="rescale-to" type="number" min="1" value="${job.parallelism || 1}" style="width:4em" ${live && job.checkpointing ? "" : "disabled"} title="new parallelism">
      <button id="act-rescale" ${live && job.checkpointing ? "" : "disabled"} title="savepoint, stop, and run again from it at this parallelism">Rescale</button>
      <span id="act-result" class="muted"></span>
    </div>
    <div class="tabs">
      <a href="#/jobs/${id}" class="${tab === "overview" ? "active" : ""}">Overview</a>
      <a href="#/jobs/${id}/checkpoints" class="${tab === "checkpoints" ? "active" : ""}">Checkpoints</a>
      <a href="#/jobs/${id}/exceptions" class="${tab === "exceptions" ? "active" : ""}">Exceptions</a>
      <a href="#/jobs/${id}/spec" class="${tab === "spec" ? "active" : ""}">Job file</a>
    </div>`;
}

function wireActions(id) {
  const result = document.getElementById("act-result");
  const say = (ok, text) => { result.textContent = text; result.style.color = ok ? "var(--ok)" : "var(--bad)"; };
  const pollSavepoint = async (req) => {
    for (let i = 0; i < 600; i++) {
      const s = await api("GET", `/jobs/${id}/savepoints/${req}`);
      if (s.ok && s.data.status === "completed") { say(true, `savepoint sp-${s.data["snapshot-id"]} complete: ${s.data.location}`); return; }
      if (s.ok && s.data.status === "failed") { say(false, "savepoint failed: " + s.data.error); return; }
      await new Promise(r => setTimeout(r, 300));
    }
  };
  const on = (elId, fn) => { const b = document.getElementById(elId); if (b) b.onclick = fn; };
  on("act-savepoint", async () => {
    say(true, "savepoint in progress…");
    const r = await api("POST", `/jobs/${id}/savepoints`, JSON.stringify({ stop: false }));
    if (!r.ok) return say(false, r.data.error);
    pollSavepoint(r.data.id);
  });
  on("act-stop", async () => {
    say(true, "stopping with a savepoint…");
    const r = await api("POST", `/jobs/${id}/stop`);
    if (!r.ok) return say(false, r.data.error);
    pollSavepoint(r.data.id);
  });
  on("act-cancel", async () => {
    const r = await api("POST", `/jobs/${id}/cancel`);
    say(r.ok, r.ok ? "cancelling…" : r.data.error);
    refresh();
  });
  on("act-rescale", async () => {
    const parallelism = Number(document.getElementById("rescale-to").value);
    if (!(parallelism >= 1)) return say(false, "a parallelism is at least 1");
    say(true, `rescaling to ${parallelism}: savepoint, stop, restart…`);
    const r = await api("POST", `/jobs/${id}/rescale`, JSON.stringify({ parallelism }));
    say(r.ok, r.ok ? `running at parallelism ${parallelism}` : r.data.error);
    refresh();
  });
  on("act-restart", async () => {
    const from = document.getElementById("restart-from").value;
    const r = await api("POST", `/jobs/${id}/restart`, JSON.stringify(from ? { from } : {}));
    say(r.ok, r.ok ? "restarted" : r.data.error);
    refresh();
  });
}

// Snapshots a stopped job could restart from, in the restart selector.
async function fillRestartChoices(id) {
  const sel = document.getElementById("restart-from");
  if (!sel || sel.disabled || sel.dataset.filled) return;
  sel.dataset.filled = "1";
  const r = await api("GET", `/jobs/${id}/checkpoints`);
  if (!r.ok) return;
  for (const c of r.data.history.filter(c => c.status === "completed").reverse()) {
    const o = document.createElement("option");
    o.value = c.name;
    o.textContent = `${c.name} (${time(c["triggered-at"])})`;
    sel.appendChild(o);
  }
}

async function jobPage(id, tab, operator) {
  let lastState = null;
  const key = "job-" + id + "-" + tab + "-" + (operator || "");
  show(key, `<div id="head"></div><div id="body"></div>`, async () => {
    const r = await api("GET", `/jobs/${id}`);
    if (r.status === 404) { main.innerHTML = `<div class="message error">No job ${esc(id)}.</div>`; page = null; return; }
    if (!r.ok) throw new Error(r.data.error || r.status);
    const job = r.data;
    const head = document.getElementById("head");
    if (!head || page?.key !== key) return; // the user moved on meanwhile
    if (job.state !== lastState) {
      head.innerHTML = jobHeader(job, tab);
      wireActions(id);
      lastState = job.state;
      fillRestartChoices(id);
    }
    const body = document.getElementById("body");
    if (tab === "overview") body.innerHTML = overview(job);
    else if (tab === "checkpoints") { const html = await checkpointsTab(id); if (page?.key === key) body.innerHTML = html; }
    else if (tab === "exceptions") { const html = await exceptionsTab(id); if (page?.key === key) body.innerHTML = html; }
    else if (tab === "operators") operatorTab(job, operator, body);
    else if (tab === "spec" && !body.dataset.loaded) {
      const s = await fetch(`${API}/jobs/${id}/spec`, { headers: token() ? { Authorization: "Bearer " + token() } : {} });
      body.innerHTML = `<div class="panel"><pre class="mono">${esc(await s.text())}</pre></div>`;
      body.dataset.loaded = "1";
    }
  });
}

function overview(job) {
  const progress = job.progress != null ? `<div class="stat"><div class="v">${(100 * job.progress).toFixed(1)}%</div><div class="k">input consumed</div></div>` : "";
  const err = job.error ? `<div class="message error">${esc(job.error)}</div>` : "";
  const snap = job.snapshot ? `<div class="message ok">snapshot: <span class="mono">${esc(job.snapshot)}</span></div>` : "";
  return `${err}${snap}
  <div class="panel stats">
    <div class="stat"><div class="v">${num(job.events)}</div><div class="k">events</div></div>
    <div class="stat"><div class="v">${rate(job["events-per-second"])}</div><div class="k">events per second</div></div>
    <div class="stat"><div class="v" style="font-size:16px;padding-top:6px">${watermark(job)}</div><div class="k">watermark (UTC)</div></div>
    <div class="stat"><div class="v">${dur(job["duration-ms"])}</div><div class="k">running for</div></div>
    <div class="stat"><div class="v">${num(job.restarts)}</div><div class="k">restarts</div></div>${progress}
  </div>
  <h2>Dataflow</h2>
  <div class="panel dag">${dagSvg(job)}
    <div class="legend">backpressure: <span><i style="background:${pressureColour(0)}"></i>none</span>
    <span><i style="background:${pressureColour(0.3)}"></i>some</span><span><i style="background:${pressureColour(0.7)}"></i>high</span>
    <span><i style="background:${pressureColour(1)}"></i>blocked</span> · dashed edges: hash partitioned by key</div></div>
  <h2>Throughput</h2>
  <div class="panel">${lineChart([{ values: job["events-history"], colour: "#2563eb" }], { stepMs: job["sample-interval-ms"] })}</div>
  <h2>Operators</h2>
  <div class="panel"><table><thead><tr><th>operator</th><th>status</th><th class="num">records in</th><th class="num">records out</th>
    <th>rate out</th><th>backpressure</th><th class="num">watermark behind sources</th><th class="num">alignment</th></tr></thead><tbody>
    ${job.nodes.map(n => `<tr><td><a href="#/jobs/${esc(job.id)}/operators/${encodeURIComponent(n.name)}"><b>${esc(n.name)}</b></a> <span class="muted">${esc(n.kind)} ×${n.parallelism}</span>${(n.queryable || []).length ? ` <span class="badge queryable" title="queryable state">queryable</span>` : ""}</td>
      <td>${badge(n.status)}</td>
      <td class="num">${n.role === "source" ? "–" : num(n["records-in"])}</td>
      <td class="num">${n.role === "sink" ? "–" : num(n["records-out"])}</td>
      <td>${sparkline(n.role === "sink" ? n.history["rate-in"] : n.history["rate-out"], 110, 24)} ${rate(n.role === "sink" ? n["rate-in"] : n["rate-out"])}</td>
      <td>${sparkline(n.history.backpressure, 70, 24, "#dc2626")} <span class="bar"><span style="width:${(100 * n.backpressure).toFixed(0)}%;background:${pressureColour(n.backpressure)}"></span></span> ${(100 * n.backpressure).toFixed(0)}%</td>
      <td class="num">${dur(n["watermark-delay-ms"])}</td><td class="num">${dur(n["alignment-ms"])}</td></tr>`).join("")}
    </tbody></table></div>${restorePanel(job.restore)}${pools(job.pools || [])}`;
}

// How the job's latest restore read its operator state: ranges reached without repositioning
// (skipped seeks) against seeks performed, as one bar, with requests and bytes.
function restorePanel(r) {
  if (!r) return "";
  const w = 240, h = 18, total = Math.max(r["seeks-performed"] + r["seeks-skipped"], 1);
  const skipped = (r["seeks-skipped"] / total) * w;
  const bar = `<svg width="${w}" height="${h}" class="restore-bar"><rect width="${w}" height="${h}" fill="#f59e0b"><title>${r["seeks-performed"]} seeks performed</title></rect>
    <rect width="${skipped}" height="${h}" fill="#16a34a"><title>${r["seeks-skipped"]} seeks skipped</title></rect></svg>`;
  return `<h2>Restore</h2><div class="panel"><div class="muted">restored from <span class="mono">${esc(r.location)}</span>${r.attempt ? ` (attempt ${r.attempt})` : ""}</div>
    <div class="stats">
      <div class="stat"><div class="v">${bar}</div><div class="k">${num(r["seeks-skipped"])} seeks skipped · ${num(r["seeks-performed"])} performed</div></div>
      <div class="stat"><div class="v">${num(r.requests)}</div><div class="k">requests for ${num(r.ranges)} ranges in ${num(r.files)} files</div></div>
      <div class="stat"><div class="v">${bytes(r["bytes-read"])}</div><div class="k">read (${bytes(r["gap-bytes"])} of gaps read through)</div></div>
      <div class="stat"><div class="v">${us(r["elapsed-us"])}</div><div class="k">reading operator state</div></div>
    </div></div>`;
}

// One operator: its counters, and for a keyed operator with queryable state a lookup box.
// The box is drawn once (typing survives the page's polling); the counters are redrawn.
function operatorTab(job, name, body) {
  const n = job.nodes.find(x => x.name === name);
  if (!n) { body.innerHTML = `<div class="message error">Job ${esc(job.id)} has no operator ${esc(name)}.</div>`; return; }
  if (body.dataset.operator !== name) {
    body.dataset.operator = name;
    const states = n.queryable || [];
    const keys = (n["key-columns"] || []).join(", ");
    const form = states.length ? `<h2>State lookup</h2><div class="panel"><form id="lookup" class="lookup">
        <label>state <select name="state">${states.map(q => `<option value="${esc(q.state)}">${esc(q.state)} (${esc(q.path)}${q["max-staleness-ms"] != null ? ", ≤ " + dur(q["max-staleness-ms"]) + " stale" : ""})</option>`).join("")}</select></label>
        <label><select name="mode"><option value="key">key</option><option value="prefix">key prefix</option></select>
          <input name="key" placeholder="${esc(keys.includes(",") ? `JSON array: ${keys}` : keys)}" size="24"></label>
        <label>limit <input name="limit" type="number" min="1" max="1000" value="20" style="width:5em"></label>
        <label>path <select name="path"><option value="">declared</option><option value="direct">direct</option><option value="ordered">ordered</option></select></label>
        <button type="submit">Look up</button></form><div id="lookup-result"></div></div>`
      : `<div class="message">This operator declares no queryable state (add <code>queryable:</code> to its job file entry).</div>`;
    body.innerHTML = `<div id="op-stats"></div>${form}`;
    const f = document.getElementById("lookup");
    if (f) f.addEventListener("submit", ev => { ev.preventDefault(); lookup(job.id, name, f); });
  }
  const stats = document.getElementById("op-stats");
  if (stats) stats.innerHTML = `<h2>${esc(n.name)} <span class="muted">${esc(n.kind)} ×${n.parallelism}</span> ${badge(n.status)}</h2>
    <div class="panel stats">
      <div class="stat"><div class="v">${num(n["records-in"])}</div><div class="k">records in</div></div>
      <div class="stat"><div class="v">${num(n["records-out"])}</div><div class="k">records out</div></div>
      <div class="stat"><div class="v">${rate(n["rate-out"])}</div><div class="k">records out per second</div></div>
      <div class="stat"><div class="v">${(100 * n.backpressure).toFixed(0)}%</div><div class="k">backpressure</div></div>
      <div class="stat"><div class="v">${num(n["control-messages"])}</div><div class="k">ordered lookups answered</div></div>
    </div>${partitionsTable(n.partitions || [])}`;
}

// A source reading a partitioned log (a Kafka topic, a NATS stream): where each subtask is in
// each partition (for NATS, `end` is the stream's last sequence plus one and `lag` the
// partition's messages not yet read).
function partitionsTable(parts) {
  if (!parts.length) return "";
  const lag = parts.reduce((sum, p) => sum + (p.lag || 0), 0);
  return `<h2>Partitions <span class="muted">${parts.length}, lag ${num(lag)} records</span></h2>
    <div class="panel"><table id="partitions"><thead><tr><th>topic / stream</th><th class="num">partition</th><th class="num">subtask</th>
      <th class="num">position</th><th class="num">end</th><th class="num">lag</th></tr></thead><tbody>
    ${parts.map(p => `<tr><td>${esc(p.topic)}</td><td class="num">${p.partition}</td><td class="num">${p.subtask}</td>
      <td class="num">${num(p.position)}</td><td class="num">${p.end == null ? "–" : num(p.end)}</td>
      <td class="num">${p.lag == null ? "–" : num(p.lag)}</td></tr>`).join("")}
    </tbody></table></div>`;
}

async function lookup(id, name, form) {
  const out = document.getElementById("lookup-result");
  const d = new FormData(form);
  const q = new URLSearchParams();
  q.set(d.get("mode"), d.get("key"));
  if (d.get("limit")) q.set("limit", d.get("limit"));
  if (d.get("path")) q.set("path", d.get("path"));
  const r = await api("GET", `/jobs/${id}/state/${encodeURIComponent(name)}/${encodeURIComponent(d.get("state"))}?${q}`);
  if (!out) return;
  if (!r.ok) { out.innerHTML = `<div class="message error">${esc(r.data.error || r.data)} (HTTP ${r.status})</div>`; return; }
  const a = r.data, f = a.freshness;
  const fresh = `${a.entries.length} entr${a.entries.length === 1 ? "y" : "ies"} · ${esc(a.path)} path · as of ${time(f["as-of"])} (${dur(f["age-ms"])} ago)${f["read-your-writes"] ? " · read-your-writes" : ""}${a.truncated ? " · more left out" : ""}`;
  const cell = v => `<span class="mono">${esc(JSON.stringify(v))}</span>`;
  out.innerHTML = `<div class="muted">${fresh}</div><table><thead><tr><th>key</th><th>window</th><th>value</th><th class="num">subtask</th></tr></thead><tbody>
    ${a.entries.map(e => `<tr><td>${cell(e.key)}</td><td>${e.window ? `${time(e.window.start)} – ${time(e.window.end)}` : "–"}</td><td>${cell(e.value)}</td><td class="num">${e.subtask}</td></tr>`).join("")}
    </tbody></table>`;
}

// Connection pools of sinks that write through one: connections in use and idle against the
// maximum, waiters, acquire latency and the longest combining run.
function pools(list) {
  if (!list.length) return "";
  const gauge = (p) => {
    const w = 240, h = 18, max = Math.max(p["max-size"], 1);
    const use = (p["in-use"] / max) * w, idle = (p.idle / max) * w;
    return `<svg width="${w}" height="${h}" class="pool-gauge"><rect width="${w}" height="${h}" fill="#e5e7eb"/>
      <rect width="${use}" height="${h}" fill="#2563eb"><title>${p["in-use"]} in use</title></rect>
      <rect x="${use}" width="${idle}" height="${h}" fill="#93c5fd"><title>${p.idle} idle</title></rect></svg>`;
  };
  return `<h2>Connection pools</h2><div class="panel"><table><thead><tr><th>sink</th><th>connections (in use / idle of max)</th>
    <th class="num">waiters</th><th class="num">acquire p50</th><th class="num">acquire p99</th><th class="num">opened</th>
    <th class="num">broken</th><th class="num">timeouts</th><th class="num">longest combining run</th></tr></thead><tbody>
    ${list.map(p => `<tr><td><b>${esc(p.node)}</b></td><td>${gauge(p)} ${p["in-use"]} / ${p.idle} of ${p["max-size"]}</td>
      <td class="num">${num(p.waiters)}</td><td class="num">${us(p["acquire-p50-us"])}</td><td class="num">${us(p["acquire-p99-us"])}</td>
      <td class="num">${num(p.opened)}</td><td class="num">${num(p.broken)}</td><td class="num">${num(p.timeouts)}</td>
      <td class="num">${num(p["longest-run-actions"])} actions, ${us(p["longest-run-us"])}</td></tr>`).join("")}
    </tbody></table></div>`;
}

async function checkpointsTab(id) {
  const r = await api("GET", `/jobs/${id}/checkpoints`);
  if (!r.ok) throw new Error(r.data.error || r.status);
  const c = r.data;
  if (!c.enabled) {
    return `<div class="panel empty">Checkpoints are not enabled for this job: set <code>checkpoint.interval</code> in its file.</div>`;
  }
  const hist = c.history;
  const durations = barChart(hist.map(h => ({
    value: h["duration-ms"], colour: h.status === "completed" ? (h.kind === "savepoint" ? "#7c3aed" : "#2563eb") : "#dc2626",
    title: `${h.name}: ${dur(h["duration-ms"])} ${h.status}`,
  })), { format: v => dur(Math.round(v)), label: (it, i) => (i % Math.ceil(hist.length / 12 || 1) === 0 ? hist[i].id : "") });
  const sizes = barChart(hist.filter(h => h.bytes != null).map(h => ({ value: h.bytes, colour: "#0891b2", title: `${h.name}: ${bytes(h.bytes)}` })),
    { format: v => bytes(v) });
  const s = c.scheduler;
  const delay = s ? histogram(s.delay.buckets) : `<div class="empty">Not scheduled now.</div>`;
  return `<div class="panel stats">
      <div class="stat"><div class="v">${num(c.completed)}</div><div class="k">completed</div></div>
      <div class="stat"><div class="v">${num(c.failed)}</div><div class="k">failed</div></div>
      <div class="stat"><div class="v">${num(c.skipped)}</div><div class="k">skipped</div></div>
      <div class="stat"><div class="v">${c["in-progress"].length}</div><div class="k">in progress</div></div>
      <div class="stat"><div class="v">${dur(c["interval-ms"])}</div><div class="k">interval (${esc(c.mode)})</div></div>
      <div class="stat"><div class="v">${dur(c["alignment-ms"])}</div><div class="k">barrier alignment</div></div>
      ${s ? `<div class="stat"><div class="v">${num(s.coalesced)}</div><div class="k">coalesced ticks</div></div>
      <div class="stat"><div class="v">${us(s.delay["p50-us"])} / ${us(s.delay["p99-us"])}</div><div class="k">trigger delay p50 / p99</div></div>` : ""}
    </div>
    <div class="grid2">
      <div><h2>Duration per checkpoint</h2><div class="panel">${durations}
        <div class="legend"><span><i style="background:#2563eb"></i>checkpoint</span><span><i style="background:#7c3aed"></i>savepoint</span><span><i style="background:#dc2626"></i>failed</span></div></div></div>
      <div><h2>Size per checkpoint</h2><div class="panel">${sizes}</div></div>
    </div>
    <h2>Scheduling delay of this job's trigger (shared scheduler, logarithmic time axis)</h2><div class="panel">${delay}</div>
    <h2>History</h2>
    <div class="panel"><table><thead><tr><th>snapshot</th><th>kind</th><th>triggered</th><th class="num">duration</th><th class="num">alignment</th><th class="num">size</th><th>status</th><th>location / reason</th></tr></thead><tbody>
      ${hist.slice().reverse().map(h => `<tr><td class="mono">${esc(h.name)}</td><td>${esc(h.kind)}</td><td>${time(h["triggered-at"])}</td>
        <td class="num">${dur(h["duration-ms"])}</td><td class="num">${dur(h["alignment-ms"])}</td><td class="num">${bytes(h.bytes)}</td><td>${badge(h.status)}</td>
        <td class="mono">${esc(h.location || h.reason || "")}</td></tr>`).join("") || `<tr><td colspan="8" class="empty">None yet.</td></tr>`}
    </tbody></table></div>`;
}

async function exceptionsTab(id) {
  const r = await api("GET", `/jobs/${id}/exceptions`);
  if (!r.ok) throw new Error(r.data.error || r.status);
  const list = r.data.exceptions;
  if (!list.length) return `<div class="panel empty">No exceptions.</div>`;
  // What kind of failure: whether a restart could help.
  const categories = { data: "bad data or job: not retried", external: "a system outside weir: retried with backoff", internal: "a bug in weir: restarted", cancelled: "stopped by another failure" };
  return `<div class="panel"><table><thead><tr><th>time</th><th>kind</th><th>cause</th><th>message</th></tr></thead><tbody>
    ${list.map(e => `<tr><td>${time(e.at)}</td><td>${badge(e.kind)}</td><td>${e.category ? `<span class="badge ${esc(e.category)}" title="${esc(categories[e.category] || "")}">${esc(e.category)}</span>` : ""}</td><td class="mono">${esc(e.message)}</td></tr>`).join("")}</tbody></table></div>`;
}

async function schedulerPage() {
  show("scheduler", `<h1>Checkpoint scheduler</h1><div id="sched"></div>`, async () => {
    const r = await api("GET", "/scheduler");
    if (!r.ok) throw new Error(r.data.error || r.status);
    const s = r.data;
    const el = document.getElementById("sched");
    if (!el) return;
    el.innerHTML = `<div class="panel stats">
        <div class="stat"><div class="v">${s.threads}</div><div class="k">threads (for any number of jobs)</div></div>
        <div class="stat"><div class="v">${s.leases}</div><div class="k">pipelines</div></div>
        <div class="stat"><div class="v">${num(s.fired)}</div><div class="k">ticks fired</div></div>
        <div class="stat"><div class="v">${num(s.coalesced)}</div><div class="k">ticks coalesced</div></div>
        <div class="stat"><div class="v">${us(s.delay["p50-us"])}</div><div class="k">delay p50</div></div>
        <div class="stat"><div class="v">${us(s.delay["p99-us"])}</div><div class="k">delay p99</div></div>
      </div>
      <h2>Scheduling delay (actual start − due time), all ticks, logarithmic time axis</h2>
      <div class="panel">${histogram(s.delay.buckets)}</div>
      <h2>Pipelines</h2>
      <div class="panel"><table><thead><tr><th>pipeline</th><th class="num">interval</th><th class="num">fired</th><th class="num">coalesced</th><th class="num">p50</th><th class="num">p99</th><th>running</th></tr></thead><tbody>
      ${s.pipelines.map(p => `<tr><td>${esc(p.name)}</td><td class="num">${dur(Math.round(p["interval-us"] / 1000))}</td><td class="num">${num(p.fired)}</td>
        <td class="num">${num(p.coalesced)}</td><td class="num">${us(p["p50-us"])}</td><td class="num">${us(p["p99-us"])}</td><td>${p.running ? "yes" : ""}</td></tr>`).join("") || `<tr><td colspan="7" class="empty">No job checkpoints now.</td></tr>`}
      </tbody></table></div>`;
  });
}

const EXAMPLE = `name: bids-per-auction
description: Bids counted per auction, checkpointed every 2 seconds.
sources:
  nexmark:
    kind: nexmark
    rate: 50000
transforms:
  by-auction: {kind: key-by, from: nexmark.bid, keys: [auction]}
  counts:
    kind: aggregate
    from: by-auction
    aggregates: {bids: count(*), top: max(price)}
sinks:
  out: {kind: blackhole, from: counts}
checkpoint:
  interval: 2s
`;

function submitPage() {
  show("submit", `<h1>Submit a job</h1>
    <div class="panel">
      <div class="editor" id="editor"><div class="gutter" id="gutter"></div>
        <div class="code"><div class="marks" id="marks"></div><textarea id="yaml" spellcheck="false"></textarea></div></div>
      <div id="verdict"></div>
      <ul class="problems" id="problems"></ul>
      <div class="actions"><button class="primary" id="submit">Submit</button><span class="muted">Checked as you type; problems are marked in place.</span></div>
    </div>`);
  const ta = document.getElementById("yaml");
  ta.value = sessionStorage.getItem("weir-draft") || EXAMPLE;
  let bad = new Map();
  const paint = () => {
    const lines = ta.value.split("\n").length;
    ta.style.height = (lines * 20 + 16) + "px";
    let g = "", m = "";
    for (let i = 1; i <= lines; i++) {
      const p = bad.get(i);
      g += `<div class="${p ? "bad" : ""}" title="${p ? esc(p) : ""}">${i}</div>`;
      m += `<div class="${p ? "bad" : ""}"></div>`;
    }
    document.getElementById("gutter").innerHTML = g;
    document.getElementById("marks").innerHTML = m;
  };
  const display = (r) => {
    bad = new Map();
    const list = document.getElementById("problems");
    const verdict = document.getElementById("verdict");
    if (r.ok) {
      verdict.innerHTML = `<div class="message ok">Valid: job <b>${esc(r.data.name)}</b>, ${r.data.nodes} operators${r.data.checkpointing ? ", checkpointed" : ""}.</div>`;
      list.innerHTML = "";
    } else if (r.data && r.data.problems) {
      verdict.innerHTML = `<div class="message error">${r.data.problems.length} problem${r.data.problems.length === 1 ? "" : "s"}: nothing will run until they are fixed.</div>`;
      for (const p of r.data.problems) if (p.line) bad.set(p.line, (bad.get(p.line) ? bad.get(p.line) + "\n" : "") + `${p.key}: ${p.message}`);
      list.innerHTML = r.data.problems.map(p => `<li data-line="${p.line || ""}"><span class="where">${p.line ? `${p.line}:${p.column}` : "—"}</span><b>${esc(p.key)}</b> ${esc(p.message)}</li>`).join("");
      list.querySelectorAll("li").forEach(li => li.addEventListener("click", () => jumpTo(ta, Number(li.dataset.line))));
    } else {
      verdict.innerHTML = `<div class="message error">${esc(r.data.error || r.status)}</div>`;
      list.innerHTML = "";
    }
    paint();
  };
  let pending = null;
  const check = async () => {
    sessionStorage.setItem("weir-draft", ta.value);
    display(await api("POST", "/jobs/validate", ta.value, "application/yaml"));
  };
  ta.addEventListener("input", () => { paint(); clearTimeout(pending); pending = setTimeout(check, 350); });
  ta.addEventListener("keydown", e => {
    if (e.key === "Tab") { e.preventDefault(); document.execCommand("insertText", false, "  "); }
  });
  document.getElementById("submit").addEventListener("click", async () => {
    const r = await api("POST", "/jobs", ta.value, "application/yaml");
    if (r.status === 201) { location.hash = "#/jobs/" + r.data.id; return; }
    display(r);
  });
  paint();
  check();
}

function jumpTo(ta, line) {
  if (!line) return;
  const lines = ta.value.split("\n");
  const start = lines.slice(0, line - 1).reduce((n, l) => n + l.length + 1, 0);
  ta.focus();
  ta.setSelectionRange(start, start + (lines[line - 1] || "").length);
}

// ---------------------------------------------------------------- routing

function render() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean);
  document.querySelectorAll("header nav a").forEach(a => a.classList.toggle("active",
    a.dataset.nav === (parts[0] === "submit" ? "submit" : parts[0] === "scheduler" ? "scheduler" : "jobs")));
  if (parts[0] === "jobs" && parts[1]) return jobPage(parts[1], parts[2] || "overview", parts[3] && decodeURIComponent(parts[3]));
  if (parts[0] === "submit") return submitPage();
  if (parts[0] === "scheduler") return schedulerPage();
  return jobsPage();
}

window.addEventListener("hashchange", render);
render();
setInterval(refresh, POLL_MS);
