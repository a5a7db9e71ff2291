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

// The trouble states, worst first (docs/dashboard.md, "Trouble at a
// glance").
const stateRank = { trouble: 0, watch: 1, ok: 2 };

// curRate is the success of the calls under the config in force; 1 with
// none, as the server sorts.
function curRate(a) { return a.current && a.current.calls ? a.current.success_rate : 1; }

// healthText is an agent's health as the list, the agent page and the
// CLI's status show it: the success of the calls under the config in
// force, a percentage with one decimal ("–" before its first call), and
// a title that says so, with the window's recency-weighted health.
function healthText(a) {
  const cur = a.current || { calls: 0, version: a.config_version };
  if (!cur.calls) return ["–", "no call under v" + cur.version + " yet; the window's health " + pct(a.health)];
  return [pct(cur.success_rate), "v" + cur.version + ": " + (cur.calls - cur.failures) + " of " + cur.calls + " calls succeeded" +
    (cur.since ? " since " + when(cur.since) : "") + "; the window's health " + pct(a.health)];
}

function sortValue(a, k) {
  switch (k) {
    case "state": return (stateRank[a.state] ?? 2) * 2 + curRate(a);
    case "health": return curRate(a);
    case "route": return (a.fallback ? "1" : "0") + (a.route || "");
    case "next": return a.next || "";
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
  const cur = a.current || { calls: 0 };
  // The state's reason and the next step wrap onto two lines at most
  // (span.two): read at a glance, whole in the title, rows of one height.
  const st = el("td", { class: "trouble-" + (a.state || "ok"), "data-v": a.state || "ok", title: a.why || "nothing to look at" },
    el("span", { class: "two" }, el("span", { class: "tstate", text: a.state || "ok" }), a.why ? " " + a.why : ""));
  const [htext, htitle] = healthText(a);
  const health = cell(htext, curRate(a), "num " + (a.healthy ? "good" : "bad"));
  health.title = htitle;
  const route = cell((a.route || "(default)") + (a.fallback ? " · fallback" : ""), a.route || "", a.fallback ? "warn" : "");
  route.title = a.fallback ? "a fallback; the primary is " + (a.primary || "the function's default") : "the route in force";
  const next = el("td", { class: "next", "data-v": a.next || "" }, el("span", { class: "two", text: a.next || "–" }));
  next.title = nextText(a);
  return el("tr", { "data-ref": a.ref, "data-state": a.state || "ok" },
    el("td", { class: "id", title: a.id }, el("a", { href, text: a.id })),
    st, health,
    cell(pct(a.stats.success_rate), a.stats.success_rate, "num"),
    cell(dur(a.p95_latency_ns), a.p95_latency_ns || 0, "num"),
    cell(String(a.stats.calls), a.stats.calls, "num"),
    cell("v" + a.config_version, a.config_version, "num"),
    route,
    cell(stateText[a.change_state] || "–", a.change_state || "", "state-" + (a.change_state || "none")),
    next,
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
    noteNow(res.now);
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
      el("span", { class: "muted", text: (p.class || "") + " · " + (p.count || 0) + " failures · " }, timeText(p.created))),
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
    ["replicas seen", String((f.replicas || []).length)],
    ["revision lag", String(f.revision_lag) + (f.behind ? " (behind " + f.behind + "×)" : "")],
    ["errors", String(f.errors)],
  ];
  $("fleet-facts").replaceChildren(...facts.map(([k, v]) => el("div", { "data-fact": k }, el("dt", { text: k }), el("dd", { text: v }))));
  // The replicas seen alive, each with when it last told the fleet so.
  $("fleet-replicas").replaceChildren(...(f.replicas || []).map((r) => el("li", { "data-replica": r.name },
    el("code", { text: r.name }), r.self ? el("span", { class: "muted", text: " this replica" }) : null,
    el("span", { class: "muted", text: " · seen " }), timeText(r.last_seen))));
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

// markerLabel is a marker's label on the timeline: "applied v2",
// "rolled back v2", "confirmed v3", "rewind v4" or "set v4".
function markerLabel(m) {
  const v = "v" + m.c.to.version;
  switch (m.kind) {
    case "confirm": return "confirmed " + v;
    case "rollback": return "rolled back " + v;
    case "rewind": return ((m.c.reason || "").startsWith("rewind to v") ? "rewind " : "set ") + v;
  }
  return "applied " + v;
}

// drawTimeline draws the agent's timeline (see drawTimeAxis).
function drawTimeline(d) {
  drawTimeAxis(d);
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

// nextFact is the agent page's "Next" fact: the next step, and when,
// relative ("probe route "primary" to return to it · in 5 min"), the
// exact time in its title.
function nextFact(d) {
  if (!d.next) return ["–"];
  return d.next_at ? [vis(d.next), " · ", timeText(d.next_at)] : [vis(d.next)];
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
  noteNow(d.now);
  $("agent-title").textContent = vis(d.id);
  const facts = [
    ["Health", ...healthText(d)], ["Success", pct(d.stats.success_rate)], ["Calls", String(d.stats.calls)],
    ["Failures", String(d.stats.failures)], ["p95", dur(d.p95_latency_ns)], ["Config", "v" + d.config_version],
    ["Change", stateText[d.change_state] || "–"], ["Circuit", d.circuit], ["Profile", d.profile || "–"],
    ["First token", ...firstTokenText(d)], ["Next", nextFact(d), nextText(d)],
  ];
  $("agent-facts").replaceChildren(...facts.map(([k, v, title]) => el("div", { "data-fact": k.toLowerCase() }, el("dt", { text: k }),
    typeof v === "string" ? el("dd", { text: v, title: title || v }) : el("dd", { title }, ...v))));
  drawTimeline(d);
  nextPanel(d);
  $("agent-proposals").replaceChildren(...(d.proposals.length ? d.proposals.slice().reverse().map((p) => proposalCard(p, false)) : [el("p", { class: "muted", text: "None." })]));
  $("clusters").tBodies[0].replaceChildren(...d.clusters.map((c) => el("tr", {},
    el("td", { class: "wrap", text: c.signature }), el("td", { text: c.class }), el("td", { class: "num", text: String(c.count) }),
    el("td", { class: "num", text: String(c.total) }), el("td", { text: c.trend || "" }), timeCell(c.last_seen))));
  $("history").tBodies[0].replaceChildren(...d.versions.slice().reverse().map((v) => el("tr", { "data-version": v.version },
    el("td", { class: "num", text: "v" + v.version + (v.current ? " (current)" : "") }), el("td", { text: v.made_by }),
    timeCell(v.at), el("td", { class: v.change ? "state-" + v.change.state : "", text: v.change ? stateText[v.change.state] || v.change.state : "" }),
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
  tlSeries = null;
  tlRange = ""; // chosen by its first drawing (autoRange)
  $("overview-view").hidden = true;
  $("glossary-view").hidden = true;
  $("list-view").hidden = true;
  $("agent-view").hidden = false;
  $("marker-detail").replaceChildren(el("p", { class: "muted", text: "No marker selected." }));
  try {
    showDetail(await read(path));
    loadSeries();
  } catch (e) {
    say("Could not read the agent: " + e.message, "error");
  }
}

function route() {
  const h = location.hash;
  if (h.startsWith("#/agent/")) {
    openAgent(h.slice("#/agent/".length));
  } else if (h === "#/overview") {
    showOverview();
  } else if (h === "#/glossary") {
    showGlossary();
  } else {
    current = null;
    $("overview-view").hidden = true;
    $("glossary-view").hidden = true;
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
  initTimeAxis();
  window.addEventListener("hashchange", route);
  route();
  loadAgents().then(() => { loadPending(); loadFleet(); }).catch((e) => say("Could not read the agents: " + e.message, "error"));
  setInterval(loadFleet, FLEET_MS);
  startStream();
}


// ---- times: relative, with the exact time on hover

let skew = 0; // the handler's clock minus the browser's, in ms

// noteNow records the handler's time ("now" in an answer): relative
// times and the timeline's right edge follow the loop's clock.
function noteNow(now) {
  const t = Date.parse(now || "");
  if (!isNaN(t)) skew = t - Date.now();
}
const serverNow = () => Date.now() + skew;

// ago is a time relative to the handler's now: "4 min ago", "in 2 h".
function ago(t) {
  const ms = typeof t === "number" ? t : Date.parse(t || "");
  if (isNaN(ms)) return "";
  const d = ms - serverNow(), a = Math.abs(d);
  let s;
  if (a < 5000) return "just now";
  if (a < 60000) s = Math.round(a / 1000) + " s";
  else if (a < 3600000) s = Math.round(a / 60000) + " min";
  else if (a < 86400000) s = (a < 36000000 ? (a / 3600000).toFixed(1).replace(/\.0$/, "") : Math.round(a / 3600000)) + " h";
  else s = Math.round(a / 86400000) + " d";
  return d < 0 ? s + " ago" : "in " + s;
}

// timeText is a span with a relative time, the exact one in its title;
// refreshAgo keeps it current.
function timeText(t, tag) {
  if (!t) return el(tag || "span", { text: "" });
  return el(tag || "span", { class: "time", "data-at": t, title: when(t), text: ago(t) });
}
function timeCell(t) { return timeText(t, "td"); }
function refreshAgo() {
  for (const e of document.querySelectorAll("[data-at]")) e.textContent = ago(e.dataset.at);
}

// ---- the timeline on a time axis: success and latency per version,
// markers at their true times, zoomable to the last hour, day, week

const RANGES = { hour: 3600e3, day: 86400e3, week: 7 * 86400e3 };
let tlRange = "";     // "hour", "day", "week"; "" until autoRange chose
let tlSeries = null; // the series of the agent shown, for tlRange

async function loadSeries() {
  const id = current;
  if (id === null) return;
  try {
    const s = await read("api/agents/" + seg(id) + "/series?range=" + (tlRange === "fit" ? "hour" : tlRange || "day"));
    if (current !== id || s.range !== (tlRange === "fit" ? "hour" : tlRange)) return;
    noteNow(s.now);
    tlSeries = s;
    if (detail) drawTimeAxis(detail);
  } catch (e) {
    say("Could not read the agent's timeline: " + e.message, "error");
  }
}

// autoRange picks the shortest range that shows the agent's latest
// change, the last day when it has none.
function autoRange(d) {
  const ms = markers(d), last = ms.length ? ms[ms.length - 1].t : NaN, age = serverNow() - last;
  tlRange = age < RANGES.hour * 0.8 ? "fit" : age < RANGES.day * 0.95 || isNaN(age) ? "day" : "week";
  for (const b of document.querySelectorAll("#ranges button")) b.setAttribute("aria-pressed", String(b.dataset.range === tlRange));
}

// spanOf is the width of the timeline in ms: the range chosen, or for
// "fit" from a little before the oldest marker of the last hour to now.
function spanOf(d) {
  if (tlRange !== "fit") return RANGES[tlRange];
  const now = serverNow(), ms = markers(d).filter((m) => now - m.t < RANGES.hour);
  const age = ms.length ? now - ms[0].t : RANGES.hour;
  return Math.min(RANGES.hour, Math.max(2 * MIN, age * 1.25));
}

function setRange(r) {
  tlRange = r;
  for (const b of document.querySelectorAll("#ranges button")) b.setAttribute("aria-pressed", String(b.dataset.range === r));
  tlSeries = null;
  if (detail) drawTimeAxis(detail);
  loadSeries();
}

const MIN = 60e3, HOUR = 3600e3, DAY = 86400e3;
const STEPS = [5e3, 10e3, 15e3, 30e3, MIN, 2 * MIN, 5 * MIN, 10 * MIN, 15 * MIN, 30 * MIN, HOUR, 2 * HOUR, 3 * HOUR, 6 * HOUR, 12 * HOUR, DAY, 2 * DAY];
const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
const two = (n) => String(n).padStart(2, "0");

// ticks returns labelled ticks (UTC) between t0 and t1, at most n: the
// time, and the date where the day changes.
function ticks(t0, t1, n) {
  let i = STEPS.findIndex((s) => (t1 - t0) / s <= n);
  if (i > 0 && (t1 - t0) / STEPS[i] < 3) i--; // three ticks at least
  const step = i < 0 ? 7 * DAY : STEPS[i];
  const out = [];
  let lastDay = "";
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
    const d = new Date(t);
    const day = MONTHS[d.getUTCMonth()] + " " + d.getUTCDate();
    const hm = two(d.getUTCHours()) + ":" + two(d.getUTCMinutes()) + (step < MIN ? ":" + two(d.getUTCSeconds()) : "");
    // The date goes on a line of its own under the time (the first tick
    // and where the day changes), so that at 390 px labels never overlap.
    const newDay = day !== lastDay && (step >= DAY || out.length === 0 || hm.startsWith("00:00"));
    out.push({ t, label: step >= DAY ? day : hm, date: newDay && step < DAY ? day : "" });
    lastDay = day;
  }
  return out;
}

// drawTimeAxis draws the success rate (top) and the latency p50/p95
// (bottom) of the agent over the range chosen, a segment per config
// version, and its changes' markers where they happened.
function drawTimeAxis(d) {
  if (!tlRange) autoRange(d);
  const g = $("timeline"), lg = $("latency");
  const W = Math.max(300, Math.round(g.getBoundingClientRect().width) || 800), H = 220, L = 44, R = 40, T = 14, B = 34;
  g.setAttribute("viewBox", "0 0 " + W + " " + H);
  const t1 = serverNow(), t0 = t1 - spanOf(d);
  const x = (t) => L + (t - t0) / (t1 - t0) * (W - L - R);
  const y = (r) => T + (1 - r) * (H - T - B);
  const kids = [];
  for (const r of [0, 0.5, 0.9, 1]) {
    kids.push(svg("line", { class: "grid-line", x1: L, x2: W - R, y1: y(r), y2: y(r) }));
    kids.push(svg("text", { x: 4, y: y(r) + 4, text: (r * 100) + "%" }));
  }
  kids.push(svg("line", { class: "axis", x1: L, x2: L, y1: T, y2: H - B }));
  kids.push(svg("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }));
  for (const k of ticks(t0, t1, Math.max(4, Math.floor((W - L - R) / 100)))) {
    const tx = x(k.t);
    kids.push(svg("line", { class: "tick", x1: tx, x2: tx, y1: H - B, y2: H - B + 5 }));
    kids.push(svg("text", { class: "tick-label", x: tx, y: H - B + 16, "text-anchor": "middle", "data-t": k.t, text: k.label }));
    if (k.date) kids.push(svg("text", { class: "tick-date", x: tx, y: H - B + 29, "text-anchor": "middle", text: k.date }));
  }
  kids.push(svg("line", { id: "timeline-now", class: "now", "data-t": t1, x1: x(t1), x2: x(t1), y1: T, y2: H - B }));
  kids.push(svg("text", { x: x(t1) + 3, y: T + 8, text: "now" }));
  const mid = (p) => Math.min(t1, Date.parse(p.t) + ptSpan(p) / 2);
  const all = (tlSeries && tlSeries.points || []).filter((p) => mid(p) >= t0);
  const pts = all.filter((p) => p.calls > 0);
  let lastV = 0, vEnd = -Infinity; // the last version labelled, where its label ends
  for (const run of byVersion(pts)) {
    const xy = run.map((p) => [x(mid(p)), y(p.success_rate)]);
    kids.push(svg("polyline", { class: "series v" + (run[0].version % 2), "data-version": run[0].version, points: xy.map((p) => p.join(",")).join(" ") }));
    for (const [px, py] of xy) kids.push(svg("circle", { class: "dot v" + (run[0].version % 2), cx: px, cy: py, r: 2.5 }));
    // A version's label where its run starts, unless it would run into
    // the one before (versions minutes apart on a day's axis).
    const vl = "v" + run[0].version;
    if (run[0].version !== lastV && xy[0][0] + 3 >= vEnd) {
      kids.push(svg("text", { class: "version-label", x: xy[0][0] + 3, y: H - B - 4, text: vl }));
      vEnd = xy[0][0] + 3 + vl.length * 6.5 + 4;
    }
    lastV = run[0].version;
  }
  if (!pts.length) kids.push(svg("text", { x: L + 8, y: T + 24, text: tlSeries ? "no calls in this range" : "reading…" }));
  const ms = markers(d).filter((m) => m.t >= t0 && m.t <= t1 + 1000);
  const rows = [-Infinity, -Infinity, -Infinity, -Infinity], labels = []; // where each row of labels ends, the labels
  ms.forEach((m, i) => {
    const mx = x(m.t);
    const sel = i === selectedMarker ? " selected" : "";
    const show = () => { selectedMarker = i; showMarker(m); for (const e of g.querySelectorAll(".marker")) e.classList.toggle("selected", e.dataset.i === String(i)); };
    const title = svg("title", { text: m.kind + " · " + when(m.t) });
    kids.push(svg("line", { class: "marker " + m.kind + sel, "data-i": i, "data-kind": m.kind, x1: mx, x2: mx, y1: T, y2: H - B, onmouseenter: show, onclick: show }));
    const r = svg("rect", { class: "marker " + m.kind + sel, "data-i": i, "data-kind": m.kind, "data-t": m.t, x: mx - 6, y: T - 2 + (i % 2) * 4, width: 12, height: 12, tabindex: 0,
      onmouseenter: show, onclick: show, onkeydown: (e) => { if (e.key === "Enter") show(); } });
    r.append(title);
    kids.push(r);
    // The label beside the marker (before it near the right edge), on the
    // first row it leaves room on (widths estimated from the length), so
    // that labels of markers close in time do not sit on each other.
    const label = markerLabel(m), lw = label.length * 5.6 + 6, before = mx + 8 + lw > W - 2;
    const left = before ? mx - 8 - lw : mx + 8;
    let row = rows.findIndex((end) => end <= left);
    if (row < 0) row = i % rows.length;
    rows[row] = left + lw;
    labels.push(svg("text", { class: "marker-label " + m.kind, "data-i": i, x: before ? mx - 8 : mx + 8, "text-anchor": before ? "end" : "start",
      y: T + 24 + row * 12, text: label }));
  });
  g.replaceChildren(...kids, ...labels); // the labels over the markers

  drawLatency(lg, pts, x, W, L, R, mid);
  drawQuality(d, all, x, W, L, R, mid);
  if (selectedMarker >= 0 && selectedMarker < ms.length) showMarker(ms[selectedMarker]);
}

// ptSpan is the time a point spans, in ms: a stored bucket's width, else
// the series' step.
function ptSpan(p) { return p.width_ns ? p.width_ns / 1e6 : (tlSeries ? tlSeries.step_ns / 1e6 : 0); }

// byVersion splits points into runs of one config version, and breaks a
// run across a gap (a point that does not start within half a span of
// where the one before ends), so that sparse points are not joined by
// long lines across times with no calls.
function byVersion(pts) {
  const runs = [];
  let end = -Infinity;
  for (const p of pts) {
    const last = runs[runs.length - 1], t = Date.parse(p.t);
    const gap = t - end > ptSpan(p) / 2;
    if (last && last[0].version === p.version && !gap) last.push(p); else runs.push([p]);
    end = t + ptSpan(p);
  }
  return runs;
}

// drawLatency draws p50 and p95 on the timeline's time axis.
function drawLatency(lg, pts, x, W, L, R, mid) {
  const H = 120, T = 10, B = 10;
  lg.setAttribute("viewBox", "0 0 " + W + " " + H);
  // A stored point has no quantiles: its mean latency is drawn as its p50.
  pts = pts.map((p) => p.stored ? { ...p, p50_ns: p.mean_ns, p95_ns: null } : p);
  const top = Math.max(1e6, ...pts.map((p) => p.p95_ns || p.p50_ns));
  const y = (ns) => T + (1 - ns / top) * (H - T - B);
  const kids = [svg("line", { class: "axis", x1: L, x2: L, y1: T, y2: H - B }), svg("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }),
    svg("line", { class: "grid-line", x1: L, x2: W - R, y1: y(top), y2: y(top) }),
    svg("text", { x: 2, y: y(top) + 4, text: dur(top) }), svg("text", { x: 2, y: H - B, text: "0" })];
  for (const run of byVersion(pts)) {
    for (const [k, cls] of [["p95_ns", "p95"], ["p50_ns", "p50"]]) {
      const has = run.filter((p) => p[k] !== null);
      if (!has.length) continue;
      kids.push(svg("polyline", { class: "lat " + cls, "data-version": run[0].version, points: has.map((p) => x(mid(p)) + "," + y(p[k])).join(" ") }));
      // A dot per point, so that a slot alone in its run shows too.
      for (const p of has) {
        const c = svg("circle", { class: "lat-dot " + cls, cx: x(mid(p)), cy: y(p[k]), r: 2.5 });
        c.append(svg("title", { text: (p.stored ? "mean (kept by the loop)" : cls) + " v" + p.version + " · " + when(p.t) + " · " + dur(p[k]) }));
        kids.push(c);
      }
    }
  }
  lg.replaceChildren(...kids);
}

// drawQuality draws, below the latency, the mean quality of the scores
// booked in each slot (0–1) and the cost per successful call (its own
// axis), each only for an agent that has scores or costs for one of the
// versions the loop keeps (so a panel, once there, stays for the agent:
// the layout does not jump with the range or between reads).
function drawQuality(d, all, x, W, L, R, mid) {
  const has = (k) => d.versions.some((v) => v.quality && v.quality[k] > 0);
  const panel = (id, on, pts, val, top, label) => {
    $(id + "-panel").hidden = !on;
    const g = $(id);
    if (!on) { g.replaceChildren(); return; }
    const H = 120, T = 10, B = 10;
    g.setAttribute("viewBox", "0 0 " + W + " " + H);
    const y = (v) => T + (1 - v / top) * (H - T - B);
    const kids = [svg("line", { class: "axis", x1: L, x2: L, y1: T, y2: H - B }), svg("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }),
      svg("line", { class: "grid-line", x1: L, x2: W - R, y1: y(top), y2: y(top) }),
      svg("text", { x: 2, y: y(top) + 4, text: label(top) }), svg("text", { x: 2, y: H - B, text: "0" })];
    for (const run of byVersion(pts)) {
      const cls = " v" + (run[0].version % 2);
      kids.push(svg("polyline", { class: "series" + cls, "data-version": run[0].version, points: run.map((p) => x(mid(p)) + "," + y(val(p))).join(" ") }));
      for (const p of run) {
        const c = svg("circle", { class: "dot" + cls, cx: x(mid(p)), cy: y(val(p)), r: 2.5 });
        c.append(svg("title", { text: "v" + p.version + " · " + when(p.t) + " · " + label(val(p)) + " (" + (id === "quality" ? p.scored + " scored" : p.costed + " with a cost") + ")" }));
        kids.push(c);
      }
    }
    kids.push(svg("text", { x: L + 8, y: T + 14, text: pts.length ? (id === "quality" ? "mean quality" : "cost per successful call") :
      (id === "quality" ? "no scored calls in this range" : "no call with a cost succeeded in this range") }));
    g.replaceChildren(...kids);
  };
  const q = all.filter((p) => p.scored > 0), c = all.filter((p) => p.cost_per_success !== undefined);
  panel("quality", has("scored"), q, (p) => p.quality || 0, 1, (v) => String(+v.toFixed(2)));
  panel("cost", has("costed"), c, (p) => p.cost_per_success, Math.max(1e-9, ...c.map((p) => p.cost_per_success)), (v) => String(+v.toPrecision(3)));
}

// ---- what comes next

// nextPanel fills the agent's "what comes next": the next step and when,
// the change under verification or the last one's outcome and what
// follows a rollback, the probe schedule, dead routes and the proposals
// waiting for a person.
function nextPanel(d) {
  const rows = [];
  const add = (key, label, ...kids) => rows.push(el("div", { "data-next": key }, el("dt", { text: label }), el("dd", {}, ...kids)));
  add("step", "Next step", d.next || "nothing planned", d.next_at ? " · " : "", d.next_at ? timeText(d.next_at) : null);
  if ((d.next || "").startsWith("cooling down") && d.next_at) add("cooldown", "Cooldown until", timeText(d.next_at), " (" + when(d.next_at) + ")");
  const ch = d.changes.length ? d.changes[d.changes.length - 1] : null;
  if (d.change_state === "verifying") {
    const v = d.versions.find((x) => x.current);
    add("change", "Under verification", "v" + d.config_version + (v && v.at ? " since " : ""), v && v.at ? timeText(v.at) : null,
      ": kept if its calls do as well as before, else rolled back");
  } else if (d.change_state === "rolled_back" && ch) {
    add("change", "After the rollback", "v" + ch.to.version + " was rolled back ", timeText(ch.decided_at), "; the agent runs v" + ch.from.version +
      " again, that config is not tried again, and " + (d.next && d.next_at ? "after the cooldown " : "") + "the strategy answers the next failures that cross the threshold");
  } else if (d.change_state === "confirmed" && ch) {
    add("change", "Last change", "v" + ch.to.version + " confirmed ", timeText(ch.decided_at));
  }
  if (d.home) add("probe", "Probe schedule", "away from route \"" + d.home + "\"; a probe returns to it" + (d.next_at ? " " : ""), d.next_at ? timeText(d.next_at) : null);
  if (d.held) add("held", "Held", "for " + d.held + ": one probe per interval");
  if (d.dead_routes && d.dead_routes.length) add("dead", "Dead routes", d.dead_routes.map((r) => r.route).join(", ") + " until ", timeText(d.dead_routes[0].until));
  const pend = d.proposals.filter((p) => p.status === "pending");
  add("proposal", "Pending proposal", pend.length ? (pend[pend.length - 1].rationale || pend[pend.length - 1].rule || pend[pend.length - 1].id) + (pend.length > 1 ? " (+" + (pend.length - 1) + " more)" : "") + " · waits for a person" : "none");
  $("next-panel").replaceChildren(...rows);
}

// ---- the overview: a sparkline of each agent's last day, in trouble first

const OV_PAGE = 60;
let ovPage = 0;

async function loadOverview() {
  try {
    const res = await read("api/overview?limit=" + OV_PAGE + "&offset=" + ovPage * OV_PAGE);
    noteNow(res.now);
    const pages = Math.max(1, Math.ceil(res.total / OV_PAGE));
    $("ov-info").textContent = res.total + (res.total === 1 ? " agent" : " agents") + ", in trouble first · page " + (ovPage + 1) + " of " + pages;
    $("ov-prev").disabled = ovPage === 0;
    $("ov-next").disabled = ovPage >= pages - 1;
    $("ov-grid").replaceChildren(...res.agents.map(sparkCard));
  } catch (e) {
    say("Could not read the overview: " + e.message, "error");
  }
}

function sparkCard(a) {
  const W = 160, H = 36;
  const g = svg("svg", { class: "spark", viewBox: "0 0 " + W + " " + H, preserveAspectRatio: "none", role: "img", "aria-label": "success over the last day" });
  const n = a.day.length, xs = (i) => i / (n - 1) * W, ys = (r) => 2 + (1 - r) * (H - 4);
  const kids = [svg("line", { class: "grid-line", x1: 0, x2: W, y1: ys(0.9), y2: ys(0.9) })];
  let run = [];
  const flush = () => {
    if (run.length === 1) { const [cx, cy] = run[0].split(","); kids.push(svg("circle", { class: "dot", cx, cy, r: 2 })); }
    if (run.length > 1) kids.push(svg("polyline", { class: "series", points: run.join(" ") }));
    run = [];
  };
  a.day.forEach((r, i) => { if (r < 0) flush(); else run.push(xs(i) + "," + ys(r)); });
  flush();
  g.replaceChildren(...kids);
  const cur = a.current || { calls: 0 };
  return el("div", { class: "spark-card " + (a.state || "ok") + (a.healthy ? "" : " trouble"), "data-ref": a.ref, "data-health": curRate(a), "data-healthy": a.healthy, "data-state": a.state || "ok" },
    el("a", { href: "#/agent/" + a.ref, title: a.id, text: a.id }),
    el("span", { class: "trouble-" + (a.state || "ok"), title: a.why || "" }, el("span", { class: "tstate", text: a.state || "ok" }),
      el("span", { class: "num " + (a.healthy ? "good" : "bad"), text: " " + (cur.calls ? pct(cur.success_rate) : "–") })),
    g,
    el("span", { class: "muted", text: (a.why ? a.why + " · " : "") + pct(a.stats.success_rate) + " · " + a.stats.calls + " calls" + (a.change_state ? " · " + (stateText[a.change_state] || a.change_state) : "") }));
}

function showOverview() {
  current = null;
  $("agent-view").hidden = true;
  $("list-view").hidden = true;
  $("glossary-view").hidden = true;
  $("overview-view").hidden = false;
  loadOverview();
}

// showGlossary shows the glossary (glossary.md, a copy of
// docs/glossary.md): each table row "| **word** | meaning |" as a term
// and its definition, links and code marks reduced to their text.
async function showGlossary() {
  current = null;
  $("agent-view").hidden = true;
  $("list-view").hidden = true;
  $("overview-view").hidden = true;
  $("glossary-view").hidden = false;
  const dl = $("glossary");
  if (dl.childElementCount > 0) return;
  let text;
  try {
    const res = await fetch("glossary.md", { cache: "no-cache" });
    if (!res.ok) throw new Error("HTTP " + res.status);
    text = await res.text();
  } catch (e) {
    dl.replaceChildren(el("p", { class: "muted", text: "The glossary could not be loaded: " + e.message }));
    return;
  }
  const plain = (s) => s.replace(/\[([^\]]*)\]\([^)]*\)/g, "$1").replace(/`/g, "").replace(/\*\*/g, "");
  const items = [];
  for (const line of text.split("\n")) {
    const m = /^\| \*\*(.+?)\*\*(.*?) \| (.+) \|$/.exec(line);
    if (m) items.push(el("dt", { text: plain(m[1] + m[2]) }), el("dd", { text: plain(m[3]) }));
  }
  dl.replaceChildren(...items);
}

function initTimeAxis() {
  for (const b of document.querySelectorAll("#ranges button")) b.addEventListener("click", () => setRange(b.dataset.range));
  $("ov-prev").addEventListener("click", () => { ovPage--; loadOverview(); });
  $("ov-next").addEventListener("click", () => { ovPage++; loadOverview(); });
  setInterval(refreshAgo, 15000);
  setInterval(() => { if (current !== null) loadSeries(); }, 30000);
  window.addEventListener("resize", () => { if (detail && current !== null) drawTimeAxis(detail); });
}

init(); // last: every declaration above is initialised
