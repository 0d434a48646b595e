// weir dashboard: plain JavaScript, no build step. Pages are chosen by the URL's hash
// (#/, #/jobs/ID, #/jobs/ID/checkpoints, #/jobs/ID/operators/NAME, #/jobs/ID/logs, #/submit,
// #/scheduler) and refreshed by polling the REST API every second; plots are SVG drawn here.
// Refreshes update the DOM in place (morphdom, vendored): a node whose content did not change
// is left alone, so a text selection, the focus or an open menu survive the polling.
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

// Replaces `el`'s content with `html`, touching only what differs. Inputs, selects and text
// areas the user is working in keep their value; elements marked `data-keep` are never redrawn
// (forms the page draws once).
function morph(el, html) {
  if (!el) return;
  const next = el.cloneNode(false);
  next.innerHTML = html;
  morphdom(el, next, {
    childrenOnly: true,
    onBeforeElUpdated(from, to) {
      if (from.isEqualNode(to)) return false;
      if (from.hasAttribute("data-keep")) return false;
      if (from === document.activeElement && /^(INPUT|SELECT|TEXTAREA)$/.test(from.tagName)) return false;
      if (from.tagName === "SELECT" && from.dataset.filled) return false;
      return true;
    },
  });
}

// Updates a table body to `rows` ([{key, html}], in order) touching only rows that are new,
// changed or gone: a row kept is not even moved, so a selection inside it survives (morphdom
// moves every keyed row behind one inserted at the top).
function updateRows(tbody, rows) {
  if (!tbody) return;
  const wanted = new Set(rows.map(r => r.key));
  for (const tr of [...tbody.children]) if (!wanted.has(tr.dataset.key)) tr.remove();
  let at = tbody.firstElementChild;
  for (const r of rows) {
    if (at && at.dataset.key === r.key) {
      if (at.dataset.html !== r.html) { at.innerHTML = r.html; at.dataset.html = r.html; }
      at = at.nextElementSibling;
      continue;
    }
    let tr = [...tbody.children].find(x => x.dataset.key === r.key);
    if (!tr) {
      tr = document.createElement("tr");
      tr.dataset.key = r.key;
      tr.innerHTML = r.html;
      tr.dataset.html = r.html;
    }
    tbody.insertBefore(tr, at);
  }
}

// Rows and boxes with `data-href` open that page on a click, unless the click ended a text
// selection (selecting a checkpoint's location must not navigate away).
document.addEventListener("click", ev => {
  const t = ev.target.closest("[data-href]");
  if (!t || ev.target.closest("a,button,input,select,textarea")) return;
  if (String(window.getSelection() || "").length) return;
  location.hash = t.dataset.href;
});

// Asks before something that cannot be undone; resolves to whether the user agreed.
function confirmDialog(text, yes) {
  const d = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-yes").textContent = yes || "Yes";
  return new Promise(resolve => {
    const done = ok => { d.close(); resolve(ok); };
    document.getElementById("confirm-yes").onclick = () => done(true);
    document.getElementById("confirm-no").onclick = () => done(false);
    d.oncancel = () => resolve(false);
    d.showModal();
  });
}

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
  const h = Math.floor(m / 60);
  if (h < 48) return h + " h " + (m % 60) + " min";
  const d = Math.floor(h / 24);
  if (d < 730) return d + " d " + (h % 24) + " h";
  return (d / 365.25).toFixed(1) + " years";
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
  return lag != null && lag >= 0 ? `${t} (${dur(lag)} behind)` : t;
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
function lineChart(series, { w = 640, h = 180, stepMs = 1000, format = rate, empty = "Collecting samples…" } = {}) {
  const pad = { l: 64, r: 12, t: 10, b: 24 };
  const all = series.flatMap(s => s.values);
  if (all.length < 2) return `<div class="empty">${esc(empty)}</div>`;
  const max = Math.max(...all, 1e-9);
  const n = Math.max(...series.map(s => s.values.length));
  const x = i => pad.l + (i / Math.max(n - 1, 1)) * (w - pad.l - pad.r);
  const y = v => pad.t + (1 - v / max) * (h - pad.t - pad.b);
  // Scaled evenly (never stretched, which would distort the axis labels).
  let out = `<svg width="100%" viewBox="0 0 ${w} ${h}" style="max-height:${h}px">`;
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

// Text cut to fit `px` pixels of the graph's 13 px font (about 7.2 px per character).
function fit(text, px) {
  const max = Math.max(Math.floor(px / 7.2), 3);
  return text.length <= max ? text : text.slice(0, max - 1) + "…";
}

// The DAG, layered left to right by longest path from a source. Each box opens its operator;
// a failed operator is red, a skewed one (a subtask doing more than twice another's work)
// says so; several edges between the same two boxes (a self-join) are drawn apart.
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
  const pairs = {};
  for (const e of edges) (pairs[e.from + ">" + e.to] ||= []).push(e);
  for (const group of Object.values(pairs)) {
    group.forEach((e, k) => {
      const a = pos[e.from], b = pos[e.to];
      const spread = (k - (group.length - 1) / 2) * 22;
      const x1 = a.x + W, y1 = a.y + H / 2 + spread / 2, x2 = b.x - 2, y2 = b.y + H / 2 + spread / 2, mx = (x1 + x2) / 2;
      out += `<path class="edge ${esc(e.partitioning)}" d="M${x1},${y1} C${mx},${y1 + spread} ${mx},${y2 + spread} ${x2},${y2}" marker-end="url(#arrow)"/>`;
      const lbl = [e.port, e.partitioning].filter(Boolean).join(" · ");
      out += `<text class="edge-label" x="${mx}" y="${(y1 + y2) / 2 + spread - 5}" text-anchor="middle">${esc(lbl)}</text>`;
    });
  }
  nodes.forEach((n, i) => {
    const p = pos[i];
    const r = n.role === "source" ? n["rate-out"] : n["rate-in"];
    const hist = n.role === "source" ? n.history["rate-out"] : n.history["rate-in"];
    const lag = n["watermark-delay-ms"];
    const failed = n.status === "failed";
    const kind = `${n.kind} ×${n.parallelism}`;
    const skew = n.skewed ? ` · skew ${n.skew.toFixed(1)}×` : "";
    const updating = n.changes && n.changes !== "append";
    const title = `${n.name} (${kind}): backpressure ${(100 * n.backpressure).toFixed(0)}%${n.skew != null ? `, busiest subtask ${n.skew.toFixed(1)}× the least busy` : ""}; changes: ${n.changes || "append"}`;
    out += `<g class="node${failed ? " failed" : ""}${n.skewed ? " skewed" : ""}" data-href="#/jobs/${esc(job.id)}/operators/${encodeURIComponent(n.name)}" data-name="${esc(n.name)}" transform="translate(${p.x},${p.y})"><title>${esc(title)}</title>
      <rect class="box" width="${W}" height="${H}" rx="8" fill="${failed ? "#fecaca" : pressureColour(n.backpressure)}"/>
      <text class="name" x="10" y="19">${esc(fit(n.name, W - 20 - kind.length * 6.5 - 8))}</text>
      <text class="meta" x="${W - 10}" y="19" text-anchor="end">${esc(kind)}</text>
      <text class="meta${n.skewed ? " warn" : ""}" x="10" y="36">${esc(rate(r))} · bp ${(100 * n.backpressure).toFixed(0)}%${lag != null && !n.skewed ? " · wm −" + esc(dur(lag)) : ""}${esc(skew)}${updating ? " · ±updating" : ""}</text>
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
      morph(el, `<div class="empty">No jobs yet. <a href="#/submit">Submit one</a> or run <code>weir submit JOB.yaml</code>.</div>`);
      return;
    }
    morph(el, `<table><thead><tr><th>id</th><th>name</th><th>state</th><th class="num">events</th>
      <th class="num">events/s</th><th>throughput</th><th class="num">watermark</th><th class="num">duration</th></tr></thead><tbody>
      ${jobs.slice().sort((a, b) => Number(b.id) - Number(a.id)).map(j => `<tr class="link" data-id="${esc(j.id)}" data-href="#/jobs/${esc(j.id)}"><td>${esc(j.id)}</td>
        <td><b>${esc(j.name)}</b><div class="muted">${esc(j.description || "")}</div>${j.server ? `<div class="muted">on ${esc(j.server)}</div>` : ""}</td><td>${badge(j.state)}</td>
        <td class="num">${num(j.events)}</td><td class="num">${rate(j["events-per-second"])}</td>
        <td>${sparkline(j.throughput, 140, 28)}</td>
        <td class="num">${watermark(j)}</td><td class="num">${dur(j["duration-ms"])}</td></tr>`).join("")}
      </tbody></table>${(r.data.unanswered || []).map(u => `<div class="muted">Not listed: the jobs of ${esc(u)} (the <a href="#/fleet">fleet</a> page names them).</div>`).join("")}`);
  });
}

function jobHeader(job, tab) {
  const live = ["running", "restarting", "cancelling", "stopping"].includes(job.state);
  const id = esc(job.id);
  const tabs = [["overview", "Overview", ""], ["checkpoints", "Checkpoints", "/checkpoints"], ["exceptions", "Exceptions", "/exceptions"],
    ["logs", "Logs", "/logs"], ["spec", "Job", "/spec"]];
  return `<h1>${esc(job.name)} ${badge(job.state)} <span class="muted" style="font-size:13px;font-weight:400">job ${id} · run ${job.run}</span></h1>
    <div class="actions">
      <button id="act-savepoint" ${live && job.checkpointing ? "" : "disabled"}>Savepoint</button>
      <button id="act-stop" ${live && job.checkpointing ? "" : "disabled"}>Stop with savepoint</button>
      <button id="act-cancel" class="danger" ${live ? "" : "disabled"}>Cancel</button>
      <span style="margin-left:12px"></span>
      <select id="restart-from" ${live ? "disabled" : ""} title="snapshots in the job's checkpoint storage now"><option value="">from scratch</option><option value="latest">latest snapshot</option></select>
      <button id="act-restart" ${live ? "disabled" : ""}>Restart</button>
      <span style="margin-left:12px"></span>
      <input id="rescale-to" type="number" min="1" value="${job.parallelism || 1}" style="width:4em" ${live && job.checkpointing ? "" : "disabled"} title="new parallelism">
      <button id="act-rescale" ${live && job.checkpointing ? "" : "disabled"} title="savepoint, stop, and run again from it at this parallelism">Rescale</button>
    </div>
    <div class="tabs">${tabs.map(([t, label, path]) => `<a href="#/jobs/${id}${path}" class="${tab === t || (t === "overview" && tab === "operators") ? "active" : ""}">${label}</a>`).join("")}</div>`;
}

// Results of actions, newest first: they stay until dismissed (the header redraws when the
// job's state changes; these do not go with it).
function say(ok, text, key) {
  const box = document.getElementById("act-results");
  if (!box) return;
  let line = key && box.querySelector(`[data-key="${key}"]`);
  if (!line) {
    line = document.createElement("div");
    if (key) line.dataset.key = key;
    line.innerHTML = `<span class="text"></span> <button class="dismiss" title="dismiss">×</button>`;
    line.querySelector(".dismiss").onclick = () => line.remove();
    box.prepend(line);
  }
  line.className = "message " + (ok ? "ok" : "error");
  line.querySelector(".text").textContent = text;
}

function wireActions(id) {
  const pollSavepoint = async (req, key) => {
    for (let i = 0; i < 600; i++) {
      const s = await api("GET", `/jobs/${id}/savepoints/${req}`);
      if (s.ok && s.data.status === "completed") { say(true, `savepoint sp-${s.data["snapshot-id"]} complete: ${s.data.location}`, key); return; }
      if (s.ok && s.data.status === "failed") { say(false, "savepoint failed: " + s.data.error, key); return; }
      await new Promise(r => setTimeout(r, 300));
    }
  };
  let n = 0;
  const on = (elId, fn) => { const b = document.getElementById(elId); if (b) b.onclick = () => fn("act-" + (++n)); };
  on("act-savepoint", async (key) => {
    say(true, "savepoint in progress…", key);
    const r = await api("POST", `/jobs/${id}/savepoints`, JSON.stringify({ stop: false }));
    if (!r.ok) return say(false, r.data.error, key);
    pollSavepoint(r.data.id, key);
  });
  on("act-stop", async (key) => {
    if (!await confirmDialog(`Stop job ${id}? It takes a savepoint, then its sources end.`, "Stop with savepoint")) return;
    say(true, "stopping with a savepoint…", key);
    const r = await api("POST", `/jobs/${id}/stop`);
    if (!r.ok) return say(false, r.data.error, key);
    pollSavepoint(r.data.id, key);
  });
  on("act-cancel", async (key) => {
    if (!await confirmDialog(`Cancel job ${id}? It stops without a savepoint; what is in flight drains.`, "Cancel the job")) return;
    const r = await api("POST", `/jobs/${id}/cancel`);
    say(r.ok, r.ok ? "cancelling…" : r.data.error, key);
    refresh();
  });
  on("act-rescale", async (key) => {
    const parallelism = Number(document.getElementById("rescale-to").value);
    if (!(parallelism >= 1)) return say(false, "a parallelism is at least 1", key);
    say(true, `rescaling to ${parallelism}: savepoint, stop, restart…`, key);
    const r = await api("POST", `/jobs/${id}/rescale`, JSON.stringify({ parallelism }));
    say(r.ok, r.ok ? `running at parallelism ${parallelism}` : r.data.error, key);
    refresh();
  });
  on("act-restart", async (key) => {
    const from = document.getElementById("restart-from").value;
    const r = await api("POST", `/jobs/${id}/restart`, JSON.stringify(from ? { from } : {}));
    say(r.ok, r.ok ? `restarted${from ? " from " + from : ""}` : r.data.error, key);
    refresh();
  });
}

// Snapshots a stopped job could restart from, in the restart selector: only those in its
// checkpoint storage now (retention deletes old ones).
async function fillRestartChoices(id) {
  const sel = document.getElementById("restart-from");
  if (!sel || sel.disabled || sel.dataset.filled) return;
  sel.dataset.filled = "1";
  const r = await api("GET", `/jobs/${id}/snapshots`);
  if (!r.ok) return;
  for (const c of r.data.snapshots) {
    const o = document.createElement("option");
    o.value = c.name;
    o.textContent = c.name + ` (${c.kind})`;
    sel.appendChild(o);
  }
}

async function jobPage(id, tab, operator) {
  let lastState = null;
  const key = "job-" + id + "-" + tab + "-" + (operator || "");
  const tabState = {};
  show(key, `<div id="head"></div><div id="act-results" class="results"></div><div id="body"></div>`, async () => {
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
    if (tab === "overview") morph(body, overview(job));
    else if (tab === "checkpoints") await checkpointsTab(id, body, tabState);
    else if (tab === "exceptions") { const html = await exceptionsTab(id); if (page?.key === key) morph(body, html); }
    else if (tab === "operators") await operatorTab(job, operator, body, tabState);
    else if (tab === "logs") await logsTab(job, body, tabState);
    else if (tab === "spec") await specTab(id, body, tabState);
  });
}

function overview(job) {
  const progress = job.progress != null ? `<div class="stat"><div class="v">${(100 * job.progress).toFixed(1)}%</div><div class="k">input consumed</div></div>` : "";
  const err = job.error ? `<div class="message error">${esc(job.error)}</div>` : "";
  const snap = job.snapshot ? `<div class="message ok">snapshot: <span class="mono">${esc(job.snapshot)}</span></div>` : "";
  const live = ["running", "restarting", "cancelling", "stopping"].includes(job.state);
  const secs = job["duration-ms"] / 1000;
  // A run that ended shows what it did in all, not the last interval's rate (zero).
  const perSecond = live ? job["events-per-second"] : (secs > 0 ? job.events / secs : null);
  const ended = `${job.state}: ${num(job.events)} events in ${dur(job["duration-ms"])}${perSecond != null ? `, ${rate(perSecond)} on average` : ""}`;
  const late = job.nodes.reduce((n, x) => n + (x["late-dropped"] || 0), 0);
  const skipped = job.nodes.reduce((n, x) => n + (x.skipped || 0), 0);
  return `${err}${snap}
  <div class="panel stats">
    <div class="stat"><div class="v">${num(job.events)}</div><div class="k">events</div></div>
    <div class="stat"><div class="v">${rate(perSecond)}</div><div class="k">${live ? "events per second" : "events per second, whole run"}</div></div>
    <div class="stat"><div class="v" style="font-size:16px;padding-top:6px">${watermark(job)}</div><div class="k">watermark (UTC)</div></div>
    <div class="stat"><div class="v">${dur(job["duration-ms"])}</div><div class="k">${live ? "running for" : "ran for"}</div></div>
    <div class="stat"><div class="v">${num(job.restarts)}</div><div class="k">restarts</div></div>${progress}
    <div class="stat"><div class="v">${num(late)}</div><div class="k">late records dropped</div></div>
    <div class="stat"><div class="v">${num(skipped)}</div><div class="k">input records skipped</div></div>
  </div>
  <h2>Dataflow</h2>
  <div class="panel dag">${dagSvg(job)}
    <div class="legend">backpressure: <span><i style="background:${pressureColour(0)}"></i>none</span>
    <span><i style="background:${pressureColour(0.3)}"></i>some</span><span><i style="background:${pressureColour(0.7)}"></i>high</span>
    <span><i style="background:${pressureColour(1)}"></i>blocked</span> <span><i style="background:#fecaca;border:1px solid #dc2626"></i>failed</span> · dashed edges: hash partitioned by key · click a box for its subtasks</div></div>
  <h2>Throughput</h2>
  <div class="panel">${lineChart([{ values: job["events-history"], colour: "#2563eb" }], { stepMs: job["sample-interval-ms"], empty: live ? "Collecting samples…" : ended })}</div>
  <h2>Operators</h2>
  <div class="panel"><table><thead><tr><th>operator</th><th>status</th><th class="num">records in</th><th class="num">records out</th>
    <th>rate out</th><th>backpressure</th><th class="num">busy</th><th class="num">skew</th><th class="num">state</th><th class="num">watermark behind sources</th><th class="num">late / skipped</th><th class="num">alignment</th></tr></thead><tbody>
    ${job.nodes.map(n => `<tr class="link" data-href="#/jobs/${esc(job.id)}/operators/${encodeURIComponent(n.name)}"><td><a href="#/jobs/${esc(job.id)}/operators/${encodeURIComponent(n.name)}"><b>${esc(n.name)}</b></a> <span class="muted">${esc(n.kind)} ×${n.parallelism}</span>${(n.queryable || []).length ? ` <span class="badge queryable" title="queryable state">queryable</span>` : ""}</td>
      <td>${badge(n.status)}</td>
      <td class="num">${n.role === "source" ? "–" : num(n["records-in"])}</td>
      <td class="num">${n.role === "sink" ? "–" : num(n["records-out"])}</td>
      <td>${sparkline(n.role === "sink" ? n.history["rate-in"] : n.history["rate-out"], 110, 24)} ${rate(n.role === "sink" ? n["rate-in"] : n["rate-out"])}</td>
      <td>${sparkline(n.history.backpressure, 70, 24, "#dc2626")} <span class="bar"><span style="width:${(100 * n.backpressure).toFixed(0)}%;background:${pressureColour(n.backpressure)}"></span></span> ${(100 * n.backpressure).toFixed(0)}%</td>
      <td class="num">${pct(n.busy)}</td>
      <td class="num ${n.skewed ? "warn" : ""}">${n.skew == null ? "–" : n.skew.toFixed(1) + "×"}</td>
      <td class="num">${stateSize(n["state-keys"], n["state-bytes"])}</td>
      <td class="num">${dur(n["watermark-delay-ms"])}</td><td class="num">${num(n["late-dropped"])} / ${num(n.skipped)}</td><td class="num">${dur(n["alignment-ms"])}</td></tr>`).join("")}
    </tbody></table></div>${restorePanel(job.restore)}${pools(job.pools || [])}`;
}

function pct(x) { return x == null ? "–" : (100 * x).toFixed(0) + "%"; }
function stateSize(keys, b) {
  if (keys == null && b == null) return "–";
  return [keys != null ? num(keys) + " keys" : null, b != null ? bytes(b) : null].filter(Boolean).join(" · ");
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

// One operator: its counters, every subtask's figures with small charts, a live preview of
// its output, and for a keyed operator with queryable state a lookup box. The lookup form is
// drawn once (typing survives the page's polling); the rest is updated in place.
async function operatorTab(job, name, body, st) {
  const n = job.nodes.find(x => x.name === name);
  if (!n) { body.innerHTML = `<div class="message error">Job ${esc(job.id)} has no operator ${esc(name)}.</div>`; return; }
  if (body.dataset.operator !== name) {
    body.dataset.operator = name;
    st.tail = true;
    const states = n.queryable || [];
    const keys = (n["key-columns"] || []).join(", ");
    const form = states.length ? `<h2>State lookup</h2><div class="panel" data-keep><form id="lookup" class="lookup">
        <label>state <select name="state">${states.map(q => `<option value="${esc(q.state)}">${esc(q.state)} (${esc(q.path)}${q["max-staleness-ms"] != null ? ", ≤ " + dur(q["max-staleness-ms"]) + " stale" : ""})</option>`).join("")}</select></label>
        <label><select name="mode"><option value="key">key</option><option value="prefix">key prefix</option></select>
          <input name="key" placeholder="${esc(keys.includes(",") ? `JSON array: ${keys}` : keys)}" size="24"></label>
        <label>limit <input name="limit" type="number" min="1" max="1000" value="20" style="width:5em"></label>
        <label>path <select name="path"><option value="">declared</option><option value="direct">direct</option><option value="ordered">ordered</option></select></label>
        <button type="submit">Look up</button></form><div id="lookup-result"></div></div>`
      : `<div class="message">This operator declares no queryable state (add <code>queryable:</code> to its job file entry).</div>`;
    body.innerHTML = `<div id="op-stats"></div>
      <h2>Output <span class="muted" id="tail-note"></span> <button id="tail-toggle">Pause</button></h2><div class="panel" id="tail"></div>
      ${form}`;
    const f = document.getElementById("lookup");
    if (f) f.addEventListener("submit", ev => { ev.preventDefault(); lookup(job.id, name, f); });
    document.getElementById("tail-toggle").onclick = ev => {
      st.tail = !st.tail;
      ev.target.textContent = st.tail ? "Pause" : "Watch";
    };
  }
  const subtasks = n.subtasks || [];
  const wm = w => w == null ? "–" : new Date(w).toISOString().replace("T", " ").slice(0, 19);
  morph(document.getElementById("op-stats"), `<h2>${esc(n.name)} <span class="muted">${esc(n.kind)} ×${n.parallelism}</span> ${badge(n.status)}${n.changes && n.changes !== "append" ? ` <span class="badge" title="its rows are changes (+I -U +U -D)">${esc(n.changes)}</span>` : ""}${n.skewed ? ` <span class="badge warn" title="the busiest subtask does more than twice the work of the least busy">skew ${n.skew.toFixed(1)}×</span>` : ""}</h2>
    <div class="panel stats">
      <div class="stat"><div class="v">${num(n["records-in"])}</div><div class="k">records in</div></div>
      <div class="stat"><div class="v">${num(n["records-out"])}</div><div class="k">records out</div></div>
      <div class="stat"><div class="v">${rate(n["rate-out"])}</div><div class="k">records out per second</div></div>
      <div class="stat"><div class="v">${(100 * n.backpressure).toFixed(0)}%</div><div class="k">backpressure</div></div>
      <div class="stat"><div class="v">${pct(n.busy)}</div><div class="k">busy</div></div>
      <div class="stat"><div class="v">${stateSize(n["state-keys"], n["state-bytes"])}</div><div class="k">state</div></div>
      <div class="stat"><div class="v">${num(n["late-dropped"])}</div><div class="k">late records dropped</div></div>
      <div class="stat"><div class="v">${num(n.skipped)}</div><div class="k">records skipped</div></div>
      <div class="stat"><div class="v">${num(n["control-messages"])}</div><div class="k">ordered lookups answered</div></div>
    </div>
    <h2>Subtasks</h2>
    <div class="panel"><table id="subtasks"><thead><tr><th class="num">#</th><th>status</th><th class="num">records in</th><th class="num">records out</th>
      <th>rate ${n.role === "source" ? "out" : "in"}</th><th>busy</th><th class="num">backpressure</th><th class="num">idle</th>
      <th class="num">watermark</th><th class="num">per input</th><th class="num">state</th><th class="num">late</th><th class="num">skipped</th></tr></thead><tbody>
      ${subtasks.map(t => {
        const r = n.role === "source" ? "rate-out" : "rate-in";
        return `<tr><td class="num">${t.subtask}</td><td>${t.finished ? badge("finished") : ""}</td>
        <td class="num">${num(t["records-in"])}</td><td class="num">${num(t["records-out"])}</td>
        <td>${sparkline(t.history[r], 90, 22)} ${rate(t[r])}</td>
        <td>${sparkline(t.history.busy, 60, 22, "#0d9488")} ${pct(t.busy)}</td>
        <td class="num">${pct(t.backpressure)}</td><td class="num">${pct(t.idle)}</td>
        <td class="num">${wm(t.watermark)}</td><td class="num">${(t["input-watermarks"] || []).length > 1 ? t["input-watermarks"].map(wm).join("<br>") : "–"}</td>
        <td class="num">${stateSize(t["state-keys"], t["state-bytes"])}</td><td class="num">${num(t["late-dropped"])}</td><td class="num">${num(t.skipped)}</td></tr>`;
      }).join("")}
    </tbody></table></div>${partitionsTable(n.partitions || [])}`);
  await tailPanel(job, n, st);
}

// The node's last rows per subtask, as a table (newest last).
async function tailPanel(job, n, st) {
  const el = document.getElementById("tail");
  const note = document.getElementById("tail-note");
  if (!el) return;
  if (!st.tail) { if (note) note.textContent = "(paused)"; return; }
  const r = await api("GET", `/jobs/${job.id}/nodes/${encodeURIComponent(n.name)}/tail`);
  if (!r.ok) { morph(el, `<div class="message error">${esc(r.data.error || r.status)}</div>`); return; }
  const rows = r.data.subtasks.flatMap(s => s.rows.map(row => ({ subtask: s.subtask, row })));
  if (note) note.textContent = `last ${r.data["rows-per-subtask"]} rows per subtask${n.role === "sink" ? " received" : ""}${r.data.watching ? "" : " (the job has ended)"}`;
  if (!rows.length) {
    morph(el, `<div class="empty">${r.data.watching ? "Waiting for rows…" : "Nothing was recorded."}</div>`);
    return;
  }
  const cols = [...new Set(rows.flatMap(x => Object.keys(x.row)))];
  const cell = v => v == null ? `<span class="muted">null</span>` : esc(typeof v === "object" ? JSON.stringify(v) : v);
  morph(el, `<table class="tail"><thead><tr><th class="num">subtask</th>${cols.map(c => `<th>${esc(c)}</th>`).join("")}</tr></thead><tbody>
    ${rows.map(x => `<tr><td class="num">${x.subtask}</td>${cols.map(c => `<td class="mono">${cell(x.row[c])}</td>`).join("")}</tr>`).join("")}
    </tbody></table>`);
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

// The checkpoints tab; a history row opens that snapshot's detail below it.
async function checkpointsTab(id, body, st) {
  const r = await api("GET", `/jobs/${id}/checkpoints`);
  if (!r.ok) throw new Error(r.data.error || r.status);
  const c = r.data;
  if (!c.enabled) {
    morph(body, `<div class="panel empty">Checkpoints are not enabled for this job: set <code>checkpoint.interval</code> in its file.</div>`);
    return;
  }
  if (st.open != null && !st.detail) {
    const d = await api("GET", `/jobs/${id}/checkpoints/${st.open}`);
    st.detail = d.ok ? d.data : { error: d.data.error || d.status };
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
  morph(body, `<div class="panel stats">
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
    <div class="panel"><table id="cp-history"><thead><tr><th>snapshot</th><th>kind</th><th>triggered</th><th class="num">duration</th><th class="num">alignment</th><th class="num">size</th><th>status</th><th>location / reason</th></tr></thead><tbody data-keep></tbody></table>
    ${hist.length ? "" : `<div class="empty">None yet.</div>`}</div>`);
  // Rows of the history never change once written: new ones are inserted, the others are
  // left alone (a location being selected stays selected).
  const rows = [];
  for (const h of hist.slice().reverse()) {
    rows.push({ key: "cp-" + h.id, html: `<td class="mono">${st.open === h.id ? "▾" : "▸"} ${esc(h.name)}</td><td>${esc(h.kind)}</td><td>${time(h["triggered-at"])}</td>
        <td class="num">${dur(h["duration-ms"])}</td><td class="num">${dur(h["alignment-ms"])}</td><td class="num">${bytes(h.bytes)}</td><td>${badge(h.status)}</td>
        <td class="mono location">${esc(h.location || h.reason || "")}</td>` });
    if (st.open === h.id) rows.push({ key: "detail-" + h.id, html: `<td colspan="8">${checkpointDetail(st.detail)}</td>` });
  }
  const tbody = document.querySelector("#cp-history tbody");
  updateRows(tbody, rows);
  for (const tr of tbody.children) {
    tr.className = tr.dataset.key.startsWith("cp-") ? "link cp-row" : "cp-detail";
    if (tr.dataset.key.startsWith("cp-")) tr.dataset.cp = tr.dataset.key.slice(3);
  }
  if (!body.dataset.cpWired) {
    body.dataset.cpWired = "1";
    body.addEventListener("click", ev => {
      const row = ev.target.closest("tr.cp-row");
      if (!row || String(window.getSelection() || "").length) return;
      const cp = Number(row.dataset.cp);
      st.open = st.open === cp ? null : cp;
      st.detail = null;
      refresh();
    });
  }
}

// One snapshot per operator and subtask: when each acknowledged, its alignment, its state's
// size (operator state and keyed files, shared files included).
function checkpointDetail(d) {
  if (!d) return `<div class="empty">Loading…</div>`;
  if (d.error) return `<div class="message error">${esc(d.error)}</div>`;
  const acks = new Map((d.acks || []).map(a => [a.node + "/" + a.subtask, a]));
  const m = d.metadata;
  // Sizes come from the snapshot's metadata; a snapshot retention already deleted (or one
  // that never completed) still shows when each subtask acknowledged, from the history.
  const nodes = m && m.nodes ? m.nodes : [];
  const rows = [];
  const seen = new Set();
  for (const node of nodes) {
    for (const s of node.subtasks) {
      seen.add(node.name + "/" + s.subtask);
      rows.push({ node: node.name, kind: node.kind, subtask: s.subtask, s });
    }
  }
  for (const a of d.acks || []) {
    if (!seen.has(a.node + "/" + a.subtask)) rows.push({ node: a.node, kind: "", subtask: a.subtask, s: null });
  }
  const note = m && m.nodes ? "" : `<div class="muted">${m && m.error ? esc(m.error) : "No metadata: the snapshot did not complete."}${rows.length ? " Sizes are not known; acknowledgements are from the history." : ""}</div>`;
  if (!rows.length) return note;
  const html = rows.map(({ node, kind, subtask, s }) => {
    const a = acks.get(node + "/" + subtask);
    const keyed = s && s.keyed ? s.keyed.files.reduce((n, f) => n + f.size, 0) : 0;
    const op = s && s.operator ? s.operator.length : 0;
    return `<tr><td>${esc(node)} <span class="muted">${esc(kind)}</span></td><td class="num">${subtask}</td>
      <td class="num">${a ? dur(a["acked-after-ms"]) : "–"}</td><td class="num">${a ? dur(a["alignment-ms"]) : "–"}</td>
      <td class="num">${s ? bytes(op) : "–"}</td><td class="num">${s && s.keyed ? bytes(keyed) + ` in ${s.keyed.files.length} files` : "–"}</td>
      <td class="num">${s && s.keyed && s.keyed.key_groups ? `${s.keyed.key_groups[0]}–${s.keyed.key_groups[1]}` : "–"}</td></tr>`;
  });
  return `${note}<table class="detail"><thead><tr><th>operator</th><th class="num">subtask</th><th class="num">acknowledged after</th><th class="num">alignment</th>
    <th class="num">operator state</th><th class="num">keyed state</th><th class="num">key groups</th></tr></thead><tbody>${html.join("")}</tbody></table>`;
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

// The job's own log lines (warnings and errors; info while the box is ticked), appended as
// they come: the API is asked for lines after the last one shown.
async function logsTab(job, body, st) {
  if (!body.dataset.logs) {
    body.dataset.logs = "1";
    st.after = 0;
    body.innerHTML = `<div class="actions"><label><input type="checkbox" id="log-info"> include info lines (captured while ticked)</label>
      <span class="muted" id="log-note"></span></div>
      <div class="panel"><table class="logs"><thead><tr><th>time</th><th>level</th><th>where</th><th>message</th></tr></thead><tbody id="log-lines"></tbody></table>
      <div class="empty" id="log-empty">No warnings or errors.</div></div>`;
  }
  const info = document.getElementById("log-info")?.checked;
  const r = await api("GET", `/jobs/${job.id}/logs?after=${st.after}${info ? "&info=true" : ""}`);
  if (!r.ok) throw new Error(r.data.error || r.status);
  const tbody = document.getElementById("log-lines");
  if (!tbody) return;
  for (const l of r.data.lines) {
    const tr = document.createElement("tr");
    tr.className = "log " + l.level;
    tr.innerHTML = `<td>${time(l.at)}</td><td>${badge(l.level)}</td><td class="muted">${esc(l.target)}</td><td class="mono">${esc(l.message)}</td>`;
    tbody.appendChild(tr);
    st.after = l.seq;
  }
  // The page keeps what the server keeps (its buffer holds the newest lines).
  while (tbody.children.length > r.data.capacity) tbody.firstChild.remove();
  document.getElementById("log-empty").hidden = tbody.children.length > 0;
  document.getElementById("log-note").textContent = r.data.dropped ? `${num(r.data.dropped)} older lines dropped (the server keeps the newest ${r.data.capacity})` : "";
}

// The job as it runs (overrides applied, defaults filled in, secrets masked), or as it was
// submitted.
async function specTab(id, body, st) {
  if (body.dataset.spec) return;
  body.dataset.spec = "1";
  const show = async (view) => {
    const s = await fetch(`${API}/jobs/${id}/spec?view=${view}`, { headers: token() ? { Authorization: "Bearer " + token() } : {} });
    body.innerHTML = `<div class="actions"><button id="spec-effective" ${view === "effective" ? "disabled" : ""}>As it runs</button>
      <button id="spec-submitted" ${view === "submitted" ? "disabled" : ""}>As submitted</button>
      <span class="muted">${view === "effective" ? "overrides applied, every default filled in, secrets masked" : "the file as it was submitted, secrets masked"}</span></div>
      <div class="panel"><pre class="mono" id="spec-text">${esc(await s.text())}</pre></div>`;
    document.getElementById("spec-effective").onclick = () => show("effective");
    document.getElementById("spec-submitted").onclick = () => show("submitted");
  };
  await show("effective");
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

// The fleet this server belongs to: its servers with their load, and every job with the
// server running it (GET /api/v1/fleet; a lone server answers 404 and says so).
async function fleetPage() {
  show("fleet", `<h1>Fleet</h1><div id="fleet"></div>`, async () => {
    const r = await api("GET", "/fleet");
    const el = document.getElementById("fleet");
    if (!el) return;
    if (r.status === 404) {
      morph(el, `<div class="panel empty">This server runs on its own. Servers started with
        <code>--catalog postgres://… --advertise URL</code> share their jobs as a fleet.</div>`);
      return;
    }
    if (!r.ok) throw new Error(r.data.error || r.status);
    const f = r.data;
    const most = Math.max(1, ...f.servers.map(s => s.subtasks));
    const running = f.jobs.filter(j => j.server).length;
    morph(el, `<div class="panel stats">
        <div class="stat"><div class="v">${f.servers.filter(s => s.alive).length} / ${f.servers.length}</div><div class="k">servers alive</div></div>
        <div class="stat"><div class="v">${running}</div><div class="k">jobs running</div></div>
        <div class="stat"><div class="v">${dur(f["lease-ttl-ms"])}</div><div class="k">lease time</div></div>
      </div>
      <h2>Servers</h2>
      <div class="panel"><table><thead><tr><th>server</th><th>state</th><th class="num">jobs</th><th class="num">subtasks</th><th>load</th><th class="num">last heartbeat</th></tr></thead><tbody>
      ${f.servers.map(s => `<tr><td><a href="${esc(s.url)}/">${esc(s.url)}</a>${s.this ? ` <span class="muted">(this one)</span>` : ""}</td>
        <td>${badge(s.draining ? "draining" : s.alive ? "alive" : "silent")}</td><td class="num">${num(s.jobs)}</td><td class="num">${num(s.subtasks)}</td>
        <td><svg width="160" height="12"><rect width="160" height="12" fill="#f1f5f9"/><rect width="${Math.round(160 * s.subtasks / most)}" height="12" fill="#2563eb"/></svg></td>
        <td class="num">${dur(s["heartbeat-age-ms"])} ago</td></tr>`).join("") || `<tr><td colspan="6" class="empty">No servers registered.</td></tr>`}
      </tbody></table></div>
      <h2>Jobs</h2>
      <div class="panel"><table><thead><tr><th>id</th><th>name</th><th>state</th><th>server</th><th class="num">lease epoch</th><th>latest snapshot</th></tr></thead><tbody>
      ${f.jobs.slice().reverse().map(j => `<tr class="link" data-href="#/jobs/${esc(j.id)}"><td>${esc(j.id)}</td><td><b>${esc(j.name)}</b></td>
        <td>${badge(j.state)}</td><td>${j.server ? esc(j.server) : `<span class="muted">–</span>`}</td>
        <td class="num">${j.epoch == null ? "–" : esc(j.epoch)}</td><td class="muted">${esc((j["latest-snapshot"] || "").split("/").pop() || "–")}</td></tr>`).join("") || `<tr><td colspan="6" class="empty">No jobs in the fleet.</td></tr>`}
      </tbody></table></div>`);
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
      <div class="options">
        <label>file <input type="file" id="opt-file" accept=".yaml,.yml,text/yaml"></label>
        <label>parallelism <input type="number" id="opt-parallelism" min="1" placeholder="as in the file" style="width:8em"></label>
        <label>start from <input id="opt-from" placeholder="sp-3, chk-12, latest, or empty" size="22"></label>
        <label class="wide"><span>overrides, one <code>key.path=value</code> per line</span><textarea id="opt-set" rows="2" spellcheck="false" placeholder="sources.nexmark.rate=50000"></textarea></label>
      </div>
      <div class="actions"><button class="primary" id="submit">Submit</button><span class="muted">Checked as you type, with the options; every problem is marked in place.</span></div>
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
  // The options as a query: `set` per override line, `parallelism`, `from` (submit only).
  const options = (submitting) => {
    const q = new URLSearchParams();
    for (const line of document.getElementById("opt-set").value.split("\n")) if (line.trim()) q.append("set", line.trim());
    const p = document.getElementById("opt-parallelism").value.trim();
    if (p) q.set("parallelism", p);
    const from = document.getElementById("opt-from").value.trim();
    if (from && submitting) q.set("from", from);
    const text = q.toString();
    return text ? "?" + text : "";
  };
  const check = async () => {
    sessionStorage.setItem("weir-draft", ta.value);
    display(await api("POST", "/jobs/validate" + options(false), ta.value, "application/yaml"));
  };
  const later = () => { clearTimeout(pending); pending = setTimeout(check, 350); };
  ta.addEventListener("input", () => { paint(); later(); });
  for (const id of ["opt-set", "opt-parallelism"]) document.getElementById(id).addEventListener("input", later);
  document.getElementById("opt-file").addEventListener("change", async ev => {
    const f = ev.target.files[0];
    if (!f) return;
    ta.value = await f.text();
    paint();
    check();
  });
  ta.addEventListener("keydown", e => {
    if (e.key === "Tab") { e.preventDefault(); document.execCommand("insertText", false, "  "); }
  });
  document.getElementById("submit").addEventListener("click", async () => {
    const r = await api("POST", "/jobs" + options(true), ta.value, "application/yaml");
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
    a.dataset.nav === (["submit", "scheduler", "fleet"].includes(parts[0]) ? parts[0] : "jobs")));
  if (parts[0] === "jobs" && parts[1]) return jobPage(parts[1], parts[2] || "overview", parts[3] && decodeURIComponent(parts[3]));
  if (parts[0] === "submit") return submitPage();
  if (parts[0] === "scheduler") return schedulerPage();
  if (parts[0] === "fleet") return fleetPage();
  return jobsPage();
}

window.addEventListener("hashchange", render);
render();
setInterval(refresh, POLL_MS);
