// The selfimprove dashboard: plain ES2020, no dependencies. It reads the
// admin JSON API and follows its event stream with relative URLs, so it
// works wherever the handler is mounted. The stream is read with fetch, as
// EventSource cannot send the Authorization header. The admin token, when the API
// asks for one, is kept in a variable of this page only.
"use strict";

const PAGE = 50;          // rows shown per page of the table
const FETCH_PAGE = 1000;  // agents per API request
const RETRY_MS = 2000;    // reconnection delay of the event stream

let token = "";            // the admin token: memory only
let tokenWaiters = [];     // actions waiting for a token
const agents = new Map();  // ref -> AgentSummary
let sortKey = "id", sortDir = 1, page = 0;
let current = null;        // ID of the agent page shown, or null
let detail = null;         // its AgentDetail
let selectedMarker = -1;
let lastEventID = "";
let loaded = false;        // the agents were read once: counts are shown
const pendingRefresh = new Map(); // ref -> timer

const $ = (id) => document.getElementById(id);

// vis shows the C1 controls (U+0080-U+009F) and the bidi controls, which
// would reorder the text around them, as visible escapes ("\u202e").
const CONTROLS = /[\u0080-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
function vis(s) {
  return typeof s === "string" ? s.replace(CONTROLS, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0")) : s;
}

// seg encodes s as one path segment of an API path.
function seg(s) { return encodeURIComponent(s); }

// idOf decodes a ref (an escaped path segment, from the API or the
// page's hash) into the ID it names; null when it is not one, or when no
// path can carry it as a segment ("." and ".." would move the path).
function idOf(ref) {
  let id;
  try { id = decodeURIComponent(ref); } catch (e) { return null; }
  return id === "." || id === ".." ? null : id;
}

// agentPath is the API path of the agent named by ref, or null.
function agentPath(ref) {
  const id = idOf(ref);
  return id === null ? null : "api/agents/" + seg(id);
}

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "text") e.textContent = vis(v);
    else if (k === "title") e.setAttribute(k, vis(String(v)));
    else if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of kids) if (c !== null && c !== undefined) e.append(c);
  return e;
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "text") e.textContent = vis(v);
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, String(v));
  }
  return e;
}

// ---- messages and the token

function say(text, kind) {
  const m = $("msg");
  m.textContent = vis(text);
  m.className = kind || "";
}

function askToken(why) {
  $("tokenform").hidden = false;
  say(why, "error");
  $("token").focus();
  return new Promise((resolve) => tokenWaiters.push(resolve));
}

function tokenSubmitted(ev) {
  ev.preventDefault();
  const v = $("token").value.trim();
  if (!v) return;
  token = v;
  $("token").value = "";
  $("tokenform").hidden = true;
  say("", "");
  const w = tokenWaiters;
  tokenWaiters = [];
  for (const f of w) f();
  startStream(); // with the token
}

// ---- the API

class APIError extends Error {
  constructor(status, body) {
    super(body && body.error ? body.error : "HTTP " + status);
    this.status = status;
    this.field = body && body.field;
  }
}

async function api(path, opts) {
  const o = Object.assign({}, opts || {});
  o.headers = Object.assign({ Accept: "application/json" }, o.headers || {});
  if (token) o.headers.Authorization = "Bearer " + token;
  if (o.json !== undefined) {
    o.method = o.method || "POST";
    o.headers["Content-Type"] = "application/json";
    o.body = JSON.stringify(o.json);
    delete o.json;
  }
  const res = await fetch(path, o);
  let body = null;
  try { body = await res.json(); } catch (e) { body = null; }
  if (!res.ok) throw new APIError(res.status, body);
  return body;
}

// read retries a GET once the token is given when the API wants one.
async function read(path) {
  for (;;) {
    try {
      return await api(path);
    } catch (e) {
      if (e.status === 401 || (e.status === 403 && token)) {
        token = "";
        await askToken(e.status === 401 ? "This dashboard needs the admin token to read." : "Wrong token: " + e.message);
        continue;
      }
      throw e;
    }
  }
}

// mutate runs a POST, asking for the token first if none was given.
async function mutate(path, body) {
  if (!token) await askToken("The admin token is needed for this action.");
  try {
    return await api(path, { json: body });
  } catch (e) {
    if (e.status === 401 || e.status === 403) {
      token = ""; // asked again next time
      $("tokenform").hidden = false;
    }
    throw e;
  }
}

// ---- formatting

const pct = (x) => (x * 100).toFixed(1) + "%";
function dur(ns) {
  if (!ns) return "–";
  if (ns < 1e6) return (ns / 1e3).toFixed(0) + " µs";
  if (ns < 1e9) return (ns / 1e6).toFixed(ns < 1e7 ? 1 : 0) + " ms";
  return (ns / 1e9).toFixed(2) + " s";
}
function when(t) {
  if (!t) return "";
  const d = new Date(t);
  if (isNaN(d)) return String(t);
  return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}
const stateText = { verifying: "verifying", confirmed: "confirmed", rolled_back: "rolled back", superseded: "superseded" };

// ---- the agents table

function sortValue(a, k) {
  switch (k) {
    case "health": return a.health;
    case "success": return a.stats.success_rate;
    case "p95": return a.p95_latency_ns || 0;
    case "calls": return a.stats.calls;
    case "version": return a.config_version;
    case "change": return a.change_state || "";
    case "pending": return a.pending_proposals;
    default: return a.id;
  }
}

function visible() {
  const f = $("filter").value.trim().toLowerCase();
  const bad = $("only-unhealthy").checked;
  const rows = [];
  for (const a of agents.values()) {
    if (f && !a.id.toLowerCase().includes(f)) continue;
    if (bad && a.healthy) continue;
    rows.push(a);
  }
  rows.sort((x, y) => {
    const a = sortValue(x, sortKey), b = sortValue(y, sortKey);
    if (a < b) return -sortDir;
    if (a > b) return sortDir;
    return x.id < y.id ? -1 : x.id > y.id ? 1 : 0;
  });
  return rows;
}

function cell(text, value, cls) {
  return el("td", { class: cls, "data-v": value, text });
}

function agentRow(a) {
  const href = "#/agent/" + a.ref;
  return el("tr", { "data-ref": a.ref },
    el("td", { class: "id", title: a.id }, el("a", { href, text: a.id })),
    cell(pct(a.health), a.health, "num " + (a.healthy ? "good" : "bad")),
    cell(pct(a.stats.success_rate), a.stats.success_rate, "num"),
    cell(dur(a.p95_latency_ns), a.p95_latency_ns || 0, "num"),
    cell(String(a.stats.calls), a.stats.calls, "num"),
    cell("v" + a.config_version, a.config_version, "num"),
    cell(stateText[a.change_state] || "–", a.change_state || "", "state-" + (a.change_state || "none")),
    cell(String(a.pending_proposals), a.pending_proposals, "num"));
}

function renderTable() {
  const rows = visible();
  const pages = Math.max(1, Math.ceil(rows.length / PAGE));
  if (page >= pages) page = pages - 1;
  const tb = $("agents").tBodies[0];
  tb.replaceChildren(...rows.slice(page * PAGE, page * PAGE + PAGE).map(agentRow));
  // Until the API answered (it may wait for the token) there is no count
  // to show: "0 of 0" would say the loop has no agents.
  $("count").textContent = loaded ? rows.length + " of " + agents.size + " agents" : "";
  $("page-info").textContent = loaded ? "page " + (page + 1) + " of " + pages : "";
  $("prev").disabled = page === 0;
  $("next").disabled = page >= pages - 1;
  for (const th of $("agents").tHead.rows[0].cells) {
    th.setAttribute("aria-sort", th.dataset.key === sortKey ? (sortDir > 0 ? "ascending" : "descending") : "none");
  }
}

async function loadAgents() {
  let after = "";
  const seen = new Set();
  for (;;) {
    const q = "api/agents?limit=" + FETCH_PAGE + (after ? "&after=" + encodeURIComponent(after) : "");
    const res = await read(q);
    for (const a of res.agents) { agents.set(a.ref, a); seen.add(a.ref); }
    loaded = true;
    renderTable();
    if (!res.next) break;
    after = res.next;
  }
  for (const ref of agents.keys()) if (!seen.has(ref)) agents.delete(ref);
  renderTable();
}

// refreshAgent re-reads one agent after an event about it.
function refreshAgent(ref) {
  if (pendingRefresh.has(ref)) return;
  pendingRefresh.set(ref, setTimeout(async () => {
    pendingRefresh.delete(ref);
    try {
      const path = agentPath(ref);
      if (path === null) return;
      const d = await read(path);
      const { config, versions, changes, clusters, proposals, ...summary } = d;
      agents.set(ref, summary);
      renderTable();
      if (current !== null && current === idOf(ref)) showDetail(d);
    } catch (e) {
      if (e.status === 404) { agents.delete(ref); renderTable(); } else say("Could not refresh an agent: " + e.message, "error");
    }
  }, 100));
}

// ---- proposals

function proposalCard(p, withAgent) {
  const status = el("span", { class: "status", text: p.status });
  const reason = el("input", { type: "text", placeholder: "reason to reject", "aria-label": "reason to reject", maxlength: 512 });
  const buttons = [];
  const act = async (verb) => {
    for (const b of buttons) b.disabled = true;
    try {
      const body = verb === "approve" ? {} : { reason: reason.value.trim() || "rejected in the dashboard" };
      const res = await mutate("api/proposals/" + seg(p.id) + "/" + verb, body);
      status.textContent = res.proposal ? res.proposal.status : verb + "d";
      const a = res.agent;
      if (a) { agents.set(a.ref, a); renderTable(); }
      say((verb === "approve" ? "Approved" : "Rejected") + ": " + p.agent_id + (a ? " now runs config v" + a.config_version : ""), "ok");
      refreshAgent(a ? a.ref : encodeURIComponent(p.agent_id));
      loadPending();
    } catch (e) {
      say("Could not " + verb + " the proposal: " + e.message, "error");
      for (const b of buttons) b.disabled = false;
    }
  };
  if (p.status === "pending") {
    buttons.push(el("button", { type: "button", class: "approve", onclick: () => act("approve"), text: "Approve" }));
    buttons.push(el("button", { type: "button", class: "reject", onclick: () => act("reject"), text: "Reject" }));
  }
  const cfg = p.config ? Object.entries(p.config).filter(([k]) => k !== "version").map(([k, v]) => k + "=" + fmtVal(v)).join(", ") : "";
  return el("div", { class: "proposal", "data-id": p.id },
    el("div", { class: "row" },
      withAgent ? el("a", { href: "#/agent/" + encodeURIComponent(p.agent_id), text: p.agent_id }) : null,
      status,
      el("span", { class: "muted", text: (p.class || "") + " · " + (p.count || 0) + " failures · " + when(p.created) })),
    el("div", { text: p.rationale || p.rule || "" }),
    cfg ? el("div", { class: "muted", text: "config: " + cfg }) : null,
    p.rule ? el("div", { class: "muted", text: "suggestion: " + p.rule }) : null,
    buttons.length ? el("div", { class: "row" }, ...buttons, reason) : null);
}

async function loadPending() {
  try {
    const res = await read("api/proposals?status=pending");
    const box = $("pending");
    box.replaceChildren(...(res.proposals.length ? res.proposals.map((p) => proposalCard(p, true)) : [el("p", { class: "muted", text: "None." })]));
  } catch (e) {
    say("Could not read the proposals: " + e.message, "error");
  }
}

// ---- the fleet (GET api/fleet): shown only when the loop has one

const FLEET_MS = 5000; // how often the fleet's figures are read again

async function loadFleet() {
  let f;
  try { f = await read("api/fleet"); } catch (e) { return; }
  const box = $("fleet");
  box.hidden = !f.attached;
  if (!f.attached) return;
  const st = $("fleet-state");
  st.className = "badge " + (f.up ? "up" : "down");
  st.textContent = f.up ? "up" : "unreachable";
  const ms = (x) => x < 10 ? x.toFixed(2) + " ms" : Math.round(x) + " ms";
  const facts = [
    ["replica", f.replica],
    ["outages", String(f.outages)],
    ["commits", f.commits + (f.commits ? " · avg " + ms(f.commit_avg_ms) + " · max " + ms(f.commit_max_ms) : "")],
    ["conflicts", String(f.conflicts)],
    ["leases", f.leases_taken + " taken · " + f.leases_busy + " busy · " + f.lease_errors + " failed"],
    ["revision lag", String(f.revision_lag) + (f.behind ? " (behind " + f.behind + "×)" : "")],
    ["errors", String(f.errors)],
  ];
  $("fleet-facts").replaceChildren(...facts.map(([k, v]) => el("div", { "data-fact": k }, el("dt", { text: k }), el("dd", { text: v }))));
  const last = f.events.length ? f.events[f.events.length - 1] : null;
  $("fleet-last").textContent = last ? when(last.time) + ": " + last.message : "No outage since the process started.";
}

// ---- the agent page

function fmtVal(v) {
  if (v === undefined || v === null) return "–";
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

function configDiff(from, to) {
  const keys = new Set([...Object.keys(from || {}), ...Object.keys(to || {})]);
  const rows = [];
  keys.delete("version");
  for (const k of keys) {
    const a = fmtVal((from || {})[k]), b = fmtVal((to || {})[k]);
    if (a === b) continue;
    rows.push(el("tr", {}, el("th", { text: k }), el("td", { class: "diff-old", text: a }), el("td", { class: "diff-new", text: b })));
  }
  return rows.length ? el("table", {}, ...rows) : el("p", { class: "muted", text: "no difference" });
}

function statsText(s) {
  if (!s) return "–";
  return s.calls + " calls, " + s.failures + " failures, success " + pct(s.success_rate) + ", mean " + dur(s.avg_latency_ns);
}

// markers lists the timeline's markers from the agent's changes.
function markers(d) {
  const out = [];
  const seen = new Set();
  const changes = [...d.changes];
  for (const v of d.versions) if (v.change && !changes.some((c) => c.id === v.change.id)) changes.push(v.change);
  for (const c of changes) {
    if (seen.has(c.id)) continue;
    seen.add(c.id);
    const rewind = (c.reason || "").startsWith("rewind to v") || !c.window;
    out.push({ kind: rewind ? "rewind" : "change", t: Date.parse(c.applied_at), c });
    if (c.decided_at && c.state === "confirmed") out.push({ kind: "confirm", t: Date.parse(c.decided_at), c });
    if (c.decided_at && c.state === "rolled_back") out.push({ kind: "rollback", t: Date.parse(c.decided_at), c });
  }
  out.sort((a, b) => a.t - b.t);
  return out;
}

function series(d, ms) {
  const pts = [];
  for (const m of ms) {
    if (m.kind === "change" || m.kind === "rewind") {
      if (m.c.before && m.c.before.calls > 0) pts.push({ t: m.t, r: m.c.before.success_rate });
    } else if (m.c.after && m.c.after.calls > 0) {
      pts.push({ t: m.t, r: m.c.after.success_rate });
    }
  }
  return pts;
}

function drawTimeline(d) {
  const g = $("timeline");
  const W = 800, H = 220, L = 44, R = 16, T = 12, B = 28;
  const ms = markers(d);
  const pts = series(d, ms);
  const times = ms.map((m) => m.t).concat(pts.map((p) => p.t)).filter((t) => !isNaN(t));
  let t0 = times.length ? Math.min(...times) : 0, t1 = times.length ? Math.max(...times) : 1;
  if (t1 - t0 < 1000) { t0 -= 30000; t1 += 30000; }
  const span = t1 - t0;
  const nowX = W - R;
  const x = (t) => L + (t - t0) / span * (nowX - L - 40);
  const y = (r) => T + (1 - r) * (H - T - B);
  const kids = [];
  for (const r of [0, 0.5, 0.9, 1]) {
    kids.push(svg("line", { class: "grid-line", x1: L, x2: W - R, y1: y(r), y2: y(r) }));
    kids.push(svg("text", { x: 4, y: y(r) + 4, text: (r * 100) + "%" }));
  }
  kids.push(svg("line", { class: "axis", x1: L, x2: L, y1: T, y2: H - B }));
  kids.push(svg("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }));
  kids.push(svg("text", { x: L, y: H - 8, text: when(t0) }));
  kids.push(svg("text", { x: nowX - 28, y: H - 8, text: "now" }));
  const all = pts.map((p) => [x(p.t), y(p.r)]);
  all.push([nowX, y(d.stats.success_rate)]);
  kids.push(svg("polyline", { class: "series", points: all.map((p) => p.join(",")).join(" ") }));
  for (const p of all) kids.push(svg("circle", { class: "dot", cx: p[0], cy: p[1], r: 3 }));
  ms.forEach((m, i) => {
    const mx = x(m.t);
    const sel = i === selectedMarker ? " selected" : "";
    const show = () => { selectedMarker = i; showMarker(m); for (const e of g.querySelectorAll(".marker")) e.classList.toggle("selected", e.dataset.i === String(i)); };
    kids.push(svg("line", { class: "marker " + m.kind + sel, "data-i": i, "data-kind": m.kind, x1: mx, x2: mx, y1: T, y2: H - B, onmouseenter: show, onclick: show }));
    kids.push(svg("rect", { class: "marker " + m.kind + sel, "data-i": i, "data-kind": m.kind, x: mx - 6, y: T - 2, width: 12, height: 12, tabindex: 0,
      onmouseenter: show, onclick: show, onkeydown: (e) => { if (e.key === "Enter") show(); } }));
  });
  g.replaceChildren(...kids);
  if (selectedMarker >= 0 && selectedMarker < ms.length) showMarker(ms[selectedMarker]);
}

function showMarker(m) {
  const c = m.c;
  const title = { change: "Change applied", confirm: "Change confirmed", rollback: "Change rolled back", rewind: "Rewind / operator config" }[m.kind];
  const box = $("marker-detail");
  box.replaceChildren(...[
    el("p", {}, el("strong", { text: title }), " · v" + c.from.version + " → v" + c.to.version + " · " + when(m.t) + " · " + (stateText[c.state] || c.state)),
    c.reason ? el("p", { text: "Reason: " + c.reason }) : null,
    el("div", {}, el("span", { class: "muted", text: "Config diff" }), configDiff(c.from, c.to)),
    c.verdict ? el("p", { text: "Verdict: " + c.verdict }) : null,
    el("p", { class: "muted", text: "Before: " + statsText(c.before) }),
    el("p", { class: "muted", text: "After: " + statsText(c.after) }),
    c.control ? el("p", { class: "muted", text: "Control: " + statsText(c.control) }) : null].filter(Boolean));
}

// nextText is what the loop will do next for the agent, and when:
// "cooling down; next: route "gpt-4o-mini"… (at 14:20)".
function nextText(d) {
  if (!d.next) return "–";
  return d.next_at ? d.next + " (at " + when(d.next_at) + ")" : d.next;
}

// firstTokenText is the agent's time to first token: "150 ms · p90 250
// ms", with the count in the title; "–" when no stream measured one.
function firstTokenText(d) {
  const f = d.first_token;
  if (!f || !f.count) return ["–", "no stream reported its first token (set a first-token timeout)"];
  const t = dur(f.mean_ns) + " · p90 " + dur(f.p90_ns);
  return [t, "mean " + dur(f.mean_ns) + ", p90 " + dur(f.p90_ns) + ", over " + f.count + " streams since the loop started"];
}

function showDetail(d) {
  detail = d;
  $("agent-title").textContent = vis(d.id);
  const facts = [
    ["Health", pct(d.health)], ["Success", pct(d.stats.success_rate)], ["Calls", String(d.stats.calls)],
    ["Failures", String(d.stats.failures)], ["p95", dur(d.p95_latency_ns)], ["Config", "v" + d.config_version],
    ["Change", stateText[d.change_state] || "–"], ["Circuit", d.circuit], ["Profile", d.profile || "–"],
    ["First token", ...firstTokenText(d)], ["Next", nextText(d)],
  ];
  $("agent-facts").replaceChildren(...facts.map(([k, v, title]) => el("div", { "data-fact": k.toLowerCase() }, el("dt", { text: k }), el("dd", { text: v, title: title || v }))));
  drawTimeline(d);
  $("agent-proposals").replaceChildren(...(d.proposals.length ? d.proposals.slice().reverse().map((p) => proposalCard(p, false)) : [el("p", { class: "muted", text: "None." })]));
  $("clusters").tBodies[0].replaceChildren(...d.clusters.map((c) => el("tr", {},
    el("td", { class: "wrap", text: c.signature }), el("td", { text: c.class }), el("td", { class: "num", text: String(c.count) }),
    el("td", { class: "num", text: String(c.total) }), el("td", { text: c.trend || "" }), el("td", { text: when(c.last_seen) }))));
  $("history").tBodies[0].replaceChildren(...d.versions.slice().reverse().map((v) => el("tr", { "data-version": v.version },
    el("td", { class: "num", text: "v" + v.version + (v.current ? " (current)" : "") }), el("td", { text: v.made_by }),
    el("td", { text: when(v.at) }), el("td", { class: v.change ? "state-" + v.change.state : "", text: v.change ? stateText[v.change.state] || v.change.state : "" }),
    el("td", { class: "wrap", text: v.reason || "" }), el("td", { class: "wrap", text: v.change && v.change.verdict || "" }))));
}

async function openAgent(ref) {
  const path = agentPath(ref);
  if (path === null) {
    say("Not an agent this page can open: " + ref, "error");
    current = null;
    return;
  }
  current = idOf(ref);
  selectedMarker = -1;
  $("list-view").hidden = true;
  $("agent-view").hidden = false;
  $("marker-detail").replaceChildren(el("p", { class: "muted", text: "No marker selected." }));
  try {
    showDetail(await read(path));
  } catch (e) {
    say("Could not read the agent: " + e.message, "error");
  }
}

function route() {
  const h = location.hash;
  if (h.startsWith("#/agent/")) {
    openAgent(h.slice("#/agent/".length));
  } else {
    current = null;
    $("agent-view").hidden = true;
    $("list-view").hidden = false;
    renderTable();
  }
}

// ---- the live stream (fetch, so that it can carry the token)

let streamCtl = null;

function setConn(state, text) {
  const c = $("conn");
  c.className = "conn " + state;
  c.textContent = text;
}

function handleEvent(type, data, id) {
  if (id) lastEventID = id;
  if (type === "dropped" || type === "closed") return;
  let ev;
  try { ev = JSON.parse(data); } catch (e) { return; }
  if (ev.agent_ref !== undefined) refreshAgent(ev.agent_ref);
  if (type.startsWith("proposal_") || type === "improvement_applied" || type === "rolled_back" || type === "change_confirmed") loadPending();
  if (type === "fleet_unreachable" || type === "fleet_recovered") loadFleet();
}

async function startStream() {
  if (streamCtl) streamCtl.abort();
  const ctl = new AbortController();
  streamCtl = ctl;
  let first = true;
  while (!ctl.signal.aborted) {
    try {
      const headers = { Accept: "text/event-stream" };
      if (token) headers.Authorization = "Bearer " + token;
      if (lastEventID) headers["Last-Event-ID"] = lastEventID;
      const res = await fetch("api/events/stream", { headers, signal: ctl.signal, cache: "no-store" });
      if (res.status === 401 || res.status === 403) {
        setConn("reconnecting", "live updates need the token");
        return; // restarted when a token is given
      }
      if (!res.ok || !res.body) throw new Error("HTTP " + res.status);
      setConn("live", "live");
      if (!first) { loadAgents().catch(() => {}); loadPending(); if (current !== null) refreshAgent(seg(current)); }
      first = false;
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "", type = "message", data = [], id = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let nl;
        while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + (buf[nl] === "\r" && buf[nl + 1] === "\n" ? 2 : 1));
          if (line === "") {
            if (data.length) handleEvent(type, data.join("\n"), id);
            type = "message"; data = []; id = "";
          } else if (!line.startsWith(":")) {
            const i = line.indexOf(":");
            const f = i < 0 ? line : line.slice(0, i);
            let v = i < 0 ? "" : line.slice(i + 1);
            if (v.startsWith(" ")) v = v.slice(1);
            if (f === "event") type = v; else if (f === "data") data.push(v); else if (f === "id") id = v;
          }
        }
      }
    } catch (e) {
      if (ctl.signal.aborted) return;
    }
    if (ctl.signal.aborted) return;
    setConn("reconnecting", "reconnecting…");
    await new Promise((r) => setTimeout(r, RETRY_MS));
  }
}

// ---- start

function init() {
  $("tokenform").addEventListener("submit", tokenSubmitted);
  $("filter").addEventListener("input", () => { page = 0; renderTable(); });
  $("only-unhealthy").addEventListener("change", () => { page = 0; renderTable(); });
  $("prev").addEventListener("click", () => { page--; renderTable(); });
  $("next").addEventListener("click", () => { page++; renderTable(); });
  for (const th of $("agents").tHead.rows[0].cells) {
    th.addEventListener("click", () => {
      if (sortKey === th.dataset.key) sortDir = -sortDir; else { sortKey = th.dataset.key; sortDir = 1; }
      page = 0;
      renderTable();
    });
  }
  window.addEventListener("hashchange", route);
  route();
  loadAgents().then(() => { loadPending(); loadFleet(); }).catch((e) => say("Could not read the agents: " + e.message, "error"));
  setInterval(loadFleet, FLEET_MS);
  startStream();
}

init();
