// twisted-stalk web console. Plain JavaScript, no libraries, no build step.
// Everything shown comes from /api/v1/ (docs/web.md) and is written with
// textContent: job bodies and tube names are never parsed as markup.
"use strict";

const S = {
  me: null,          // /api/v1/whoami
  view: null,        // {refresh: async fn} of the page shown
  busy: false,       // a refresh is in flight (one request at a time)
  task: null,        // the running action being followed
  taskDone: null,    // {done, view}: what to do when it ends, on the view that asked
  lastTube: null,    // {name, hash} of the last tube page shown (a job's back link)
};

// ------------------------------------------------------------------ helpers

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "text") node.textContent = value;
    else if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "data") for (const [k, v] of Object.entries(value)) node.dataset[k] = v;
    else if (value === true) node.setAttribute(key, "");
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function $(selector) { return document.querySelector(selector); }

function replace(node, ...children) {
  node.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false && c !== ""));
}

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(method, path, body) {
  const options = { method, credentials: "same-origin", headers: {} };
  if (method !== "GET") {
    options.headers["Content-Type"] = "application/json";
    if (S.me && S.me.csrf) options.headers["X-CSRF-Token"] = S.me.csrf;
    options.body = JSON.stringify(body || {});
  }
  const response = await fetch("/api/v1/" + path, options);
  let data = {};
  try { data = await response.json(); } catch (e) { data = { error: response.statusText }; }
  if (!response.ok) {
    if (response.status === 401 && S.me && S.me.auth && path !== "login") toLogin();
    throw new ApiError(response.status, data.error || ("HTTP " + response.status));
  }
  data._status = response.status;
  return data;
}

function showError(message) {
  const box = $("#alert");
  box.textContent = message;
  box.hidden = false;
}

function showNotice(message) {
  const box = $("#notice");
  box.textContent = message;
  box.hidden = false;
  clearTimeout(showNotice.timer);
  showNotice.timer = setTimeout(() => { box.hidden = true; }, 5000);
}

function clearMessages() { $("#alert").hidden = true; $("#notice").hidden = true; }


// The page's title: what it shows, then the server's host name.
function setTitle(what) {
  document.title = [what, S.me && S.me.host, "twisted-stalk"].filter(Boolean).join(" · ");
}

const TUBE_STATES = ["ready", "delayed", "buried", "reserved"];

// A tube page's address: #/tube/NAME[/STATE[/PAGE]][?sort=&order=] (defaults left out).
function tubeHref(name, where) {
  const w = Object.assign({ state: "ready", page: 1, sort: "id", order: "asc" }, where || {});
  let href = "#/tube/" + encodeURIComponent(name);
  if (w.state !== "ready" || w.page > 1) href += "/" + w.state;
  if (w.page > 1) href += "/" + w.page;
  const q = new URLSearchParams();
  if (w.sort !== "id") q.set("sort", w.sort);
  if (w.order !== "asc") q.set("order", w.order);
  return href + (q.toString() ? "?" + q : "");
}

function tubeLink(name) { return el("a", { href: tubeHref(name), text: name }); }

function jobLink(id) { return el("a", { href: "#/job/" + id, text: String(id) }); }

function preview(view) {
  if (view.kind === "text") {
    return el("span", { class: "text", text: view.data + (view.truncated ? " …" : "") });
  }
  return el("span", { class: "hex", text: "hex " + view.data + (view.truncated ? " …" : "") });
}

function canAct() { return Boolean(S.me && S.me.can_act); }

function legend(names) {
  return el("div", { class: "legend" },
    names.map((n) => el("span", {}, el("i", { class: "s-" + n }), n)));
}

function last(values) { return values && values.length ? values[values.length - 1] : 0; }

// A table that stacks into labelled rows on a narrow screen (console.css).
function table(id, headings, body) {
  return el("div", { class: "table-wrap" }, el("table", { id, class: "stack" },
    el("thead", {}, el("tr", {}, headings)), body));
}

function cell(label, attrs, ...children) {
  return el("td", Object.assign({ "data-label": label }, attrs || {}), ...children);
}

// ---------------------------------------------------------------- actions

// Run an action; follow its task if it runs longer than one request.
async function act(path, body, done) {
  clearMessages();
  let data;
  try {
    data = await api("POST", path, body);
  } catch (e) {
    showError(e.message);
    return null;
  }
  const task = data.task;
  if (data._status === 202) {
    // Still running: the page follows it, and ``done`` runs when it ends
    // (unless it failed, or the reader has gone to another view meanwhile).
    S.task = task;
    S.taskDone = done ? { done, view: S.view } : null;
    showTask(task);
    return task;
  }
  finishTask(task);
  if (done) done(task);
  refreshNow();
  return task;
}

// The server words what an action did (the audit log's line, without who).
const capitalized = (text) => text.charAt(0).toUpperCase() + text.slice(1);

function showTask(task) {
  const box = $("#task");
  const bar = el("progress", { max: Math.max(task.total, 1), value: task.done });
  replace(box, el("span", { text: `${capitalized(task.doing)}: ` }), bar,
    el("span", { text: ` ${num(task.done)} of ${num(task.total)}` }));
  box.hidden = false;
}

function finishTask(task) {
  $("#task").hidden = true;
  S.task = null;
  if (task.state === "failed") showError(capitalized(task.summary));
  else showNotice(capitalized(task.summary));
}

async function followTask() {
  const data = await api("GET", "tasks/" + S.task.id);
  if (data.task.state === "running" || !data.task.finished) {
    showTask(data.task);
    return;
  }
  const after = S.taskDone;
  S.taskDone = null;
  finishTask(data.task);
  if (after && data.task.state !== "failed" && after.view === S.view) after.done(data.task);
}

// --------------------------------------------------------------- polling

async function tick() {
  if (S.busy || document.hidden) return;
  S.busy = true;
  try {
    if (S.task) await followTask();
    else if (S.view && S.view.refresh) await S.view.refresh();
  } catch (e) {
    if (!(e instanceof ApiError && e.status === 401)) showError(e.message);
  } finally {
    S.busy = false;
  }
}

function refreshNow() { setTimeout(tick, 0); }

// Whether an answer to query ``asked`` may be shown: not if the view's query
// (``now()``) changed while it was asked (Back, a tab, a filter), since it
// would show the page before under the new one; then it asks again.
function stillAsked(asked, now) {
  if (String(now()) === String(asked)) return true;
  refreshNow();
  return false;
}

// ----------------------------------------------------------------- overview

function overviewView() {
  setTitle("Overview");
  const state = { sort: "name", order: "asc", offset: 0, limit: 50, filter: "" };
  const facts = el("dl", { class: "facts", id: "server-facts" });
  const chart = el("div", { id: "server-chart" });
  const filter = el("input", { type: "search", placeholder: "filter tubes", id: "tube-filter",
    oninput: () => { state.filter = filter.value; state.offset = 0; refreshNow(); } });
  const pager = el("span", { class: "pager" });
  const columns = [["name", "Tube"], ["ready", "Ready"], ["urgent", "Urgent"],
    ["reserved", "Reserved"], ["delayed", "Delayed"], ["buried", "Buried"],
    ["waiting", "Waiting"], [null, "Paused"], [null, "Put / delete per s"]];
  const head = columns.map(([key, label]) => el("th", {
    class: (key ? "sortable" : "") + (key && key !== "name" ? " num" : ""),
    data: key ? { sort: key } : {}, text: label,
    onclick: key ? () => {
      state.order = state.sort === key && state.order === "asc" ? "desc" : "asc";
      state.sort = key; state.offset = 0; refreshNow();
    } : null,
  }));
  // The headings sort; a narrow screen has no headings, so it gets a menu instead.
  const sortMenu = el("select", { id: "tube-sort", class: "narrow-only", title: "sort tubes by",
    onchange: () => {
      state.sort = sortMenu.value;
      state.order = state.sort === "name" ? "asc" : "desc";
      state.offset = 0;
      refreshNow();
    } },
  columns.filter(([key]) => key).map(([key, label]) => el("option", { value: key,
    text: key === "name" ? "by name" : `most ${label.toLowerCase()} first` })));
  const body = el("tbody");
  replace($("#main"),
    el("h1", { text: "Overview" }),
    el("div", { class: "grid" },
      el("div", { class: "card" }, el("h2", { text: "Server" }), facts),
      el("div", { class: "card" }, el("h2", { text: "Commands per second (server)" }), chart)),
    el("h2", { text: "Tubes" }),
    el("div", { class: "toolbar" }, filter, sortMenu, pager),
    table("tubes", head, body));

  function query() {
    return new URLSearchParams({ sort: state.sort, order: state.order, offset: state.offset,
      limit: state.limit, filter: state.filter });
  }

  async function refresh() {
    const q = query();
    const data = await api("GET", "overview?" + q);
    if (!stillAsked(q, query)) return;
    const s = data.server;
    const binlog = s.binlog.enabled
      ? `${s.binlog.writable ? "writing" : "NOT WRITABLE: " + s.binlog.problem}, ` +
        `${plural(s.binlog.files, "file")}, ${bytes(s.binlog.size_bytes)}`
      : "off (jobs are kept in memory only)";
    const rows = [
      ["Version", s.version], ["Uptime", duration(s.uptime)],
      ["Connections", `${num(s["current-connections"])} (` +
        `${plural(s["current-producers"], "producer")}, ` +
        `${plural(s["current-workers"], "worker")}, ` +
        `${num(s["current-waiting"])} waiting)`],
      ["Tubes", num(s["current-tubes"])],
      ["Jobs", `${num(s["current-jobs-ready"])} ready (${num(s["current-jobs-urgent"])} urgent), ` +
        `${num(s["current-jobs-reserved"])} reserved, ${num(s["current-jobs-delayed"])} delayed, ` +
        `${num(s["current-jobs-buried"])} buried`],
      ["Stored bodies", bytes(s.job_bytes)], ["Total jobs", num(s["total-jobs"])],
      ["Binlog", binlog], ["Drain mode", s.draining ? "ON: puts are refused" : "off"],
    ];
    replace(facts, rows.map(([k, v]) => [el("dt", { text: k }),
      el("dd", { data: { fact: k.toLowerCase() }, text: v })]));
    replace(chart, rateChart(["put", "reserve", "delete"].map((n) =>
      ({ name: n, values: data.rates[n] })),
      { width: 460, height: 130, unit: "commands/s", interval: data.interval }),
      legend(["put", "reserve", "delete"]),
      el("div", { class: "muted", text: `now: ${num(last(data.rates.put))} put, ` +
        `${num(last(data.rates.reserve))} reserve, ` +
        `${num(last(data.rates.delete))} delete per second; ` +
        `one sample every ${data.interval}s` }));
    sortMenu.value = state.sort;
    for (const th of head) {
      th.classList.toggle("sorted", th.dataset.sort === state.sort);
      th.classList.toggle("desc", th.dataset.sort === state.sort && state.order === "desc");
    }
    replace(body, data.tubes.map((t) => el("tr", { data: { tube: t.name } },
      cell("Tube", { class: "name" }, tubeLink(t.name)),
      ["ready", "urgent", "reserved", "delayed", "buried", "waiting"].map((k, i) =>
        cell(columns[i + 1][1], { class: "num", data: { col: k }, text: num(t[k]) })),
      cell("Paused", { data: { col: "paused" } }, t.paused
        ? el("span", { class: "badge paused", text: "paused " + duration(t.pause_left) }) : ""),
      cell("Put / delete per s", {}, rateChart([{ name: "put", values: t.rates.put },
        { name: "delete", values: t.rates.delete }],
        { width: 170, height: 30, unit: "jobs/s", interval: data.interval, compact: true })))));
    replace(pager, pagerControls(state, data.matched, `${num(data.matched)} of ` +
      `${plural(data.total_tubes, "tube")}`));
  }
  return { refresh };
}

// Prev / next buttons; go(offset) moves (by default: sets state.offset).
function pagerControls(state, total, label, go) {
  const move = go || ((offset) => { state.offset = offset; refreshNow(); });
  const from = total ? state.offset + 1 : 0;
  const to = Math.min(total, state.offset + state.limit);
  return [
    el("button", { type: "button", "data-page": "prev", disabled: state.offset <= 0,
      onclick: () => move(Math.max(0, state.offset - state.limit)), text: "‹ Prev" }),
    el("span", { class: "muted", "data-range": "",
      text: ` ${num(from)}–${num(to)} (${label}) ` }),
    el("button", { type: "button", "data-page": "next", disabled: to >= total,
      onclick: () => move(state.offset + state.limit), text: "Next ›" }),
  ];
}

// ------------------------------------------------------------- connections

function connectionsView() {
  setTitle("Connections");
  const state = { offset: 0, limit: 100 };
  const body = el("tbody");
  const pager = el("span", { class: "pager" });
  replace($("#main"), el("h1", { text: "Connections" }), el("div", { class: "toolbar" }, pager),
    table("connections", ["Peer", "Uses", "Watches", "Waiting", "Kind", "Jobs held"].map((h) =>
      el("th", { text: h })), body));
  const query = () => new URLSearchParams(state);
  async function refresh() {
    const q = query();
    const data = await api("GET", "connections?" + q);
    if (!stillAsked(q, query)) return;
    replace(body, data.connections.map((c) => el("tr", {},
      cell("Peer", { text: c.peer }), cell("Uses", {}, tubeLink(c.use)),
      cell("Watches", {}, c.watch.flatMap((w, i) => i ? [", ", tubeLink(w)] : [tubeLink(w)])),
      cell("Waiting", { text: c.waiting ? "waiting" : "" }),
      cell("Kind", { text: [c.producer && "producer", c.worker && "worker"].filter(Boolean)
        .join(", ") }),
      cell("Jobs held", {}, `${c.reserved_count} `,
        c.reserved.flatMap((id) => [jobLink(id), " "])))));
    replace(pager, pagerControls(state, data.total, plural(data.total, "connection")));
  }
  return { refresh };
}

// ------------------------------------------------------------------ login

// To the login page, keeping where the reader was going (#/login?next=...).
function toLogin() {
  const here = location.hash.replace(/^#/, "");
  if (here.startsWith("/login")) return;
  location.hash = "#/login" + (here && here !== "/" ? "?next=" + encodeURIComponent(here) : "");
}

function loginView(next) {
  setTitle("Log in");
  const user = el("input", { id: "login-user", autocomplete: "username", placeholder: "user" });
  const password = el("input", { id: "login-password", type: "password",
    autocomplete: "current-password", placeholder: "password" });
  replace($("#main"), el("div", { class: "card login" }, el("h1", { text: "Log in" }),
    el("form", { id: "login-form", onsubmit: async (event) => {
      event.preventDefault();
      clearMessages();
      try {
        await api("POST", "login", { user: user.value, password: password.value });
        await whoami();
        location.hash = "#" + (next || "/");
      } catch (e) { showError(e.message); }
    } }, user, password, el("button", { type: "submit", text: "Log in" }))));
  return { refresh: null };
}

// ------------------------------------------------------------------ routing

async function whoami() {
  S.me = await api("GET", "whoami");
  $("#host").textContent = S.me.host || "";
  const who = $("#who");
  if (!S.me.auth) {
    replace(who, el("span", { class: "badge", id: "read-only",
      text: "read-only (no --web-auth)" }));
  } else if (S.me.user) {
    replace(who, el("span", { text: `${S.me.user} (${S.me.role})` }),
      el("button", { type: "button", id: "logout", text: "Log out", onclick: async () => {
        await api("POST", "logout", {}); S.me.user = null; S.me.host = null;
        $("#host").textContent = ""; location.hash = "#/login"; route(); } }));
  } else {
    replace(who, el("a", { href: "#/login", text: "Log in" }));
  }
}

function decoded(text) {
  try { return decodeURIComponent(text); } catch (e) { return text; }
}

// #/tube/NAME[/STATE[/PAGE]]?sort&order (NAME percent-encoded; a name typed
// with a raw "/" in it works too when what follows is no state).
function tubeRoute(parts, query) {
  const where = { state: "ready", page: 1, sort: query.get("sort") || "id",
                  order: query.get("order") === "desc" ? "desc" : "asc" };
  if (parts.length >= 2 && parts.length <= 3 && TUBE_STATES.includes(parts[1]) &&
      (parts.length === 2 || /^[1-9]\d*$/.test(parts[2]))) {
    where.state = parts[1];
    where.page = parts.length === 3 ? Number(parts[2]) : 1;
    return [decoded(parts[0]), where];
  }
  return [decoded(parts.join("/")), where];
}

function route() {
  clearMessages();
  const hash = location.hash.replace(/^#\/?/, "");
  const q = hash.indexOf("?");
  const [page, ...rest] = (q < 0 ? hash : hash.slice(0, q)).split("/");
  const query = new URLSearchParams(q < 0 ? "" : hash.slice(q + 1));
  if (S.me && S.me.auth && !S.me.user && page !== "login") {
    toLogin();
    return;
  }
  if (page === "tube" && rest.length && rest[0]) {
    const [name, where] = tubeRoute(rest, query);
    if (S.view && S.view.kind === "tube" && S.view.name === name) {
      S.view.go(where);
      return;
    }
    S.view = tubeView(name, where);
  } else if (page === "job" && /^\d+$/.test(rest.join("/"))) {
    S.view = jobView(Number(rest[0]));
  } else if (page === "connections") {
    S.view = connectionsView();
  } else if (page === "login") {
    const next = query.get("next");
    S.view = loginView(next && next.startsWith("/") && !next.startsWith("/login") ? next : null);
  } else {
    S.view = overviewView();
  }
  refreshNow();
}

async function start() {
  try {
    await whoami();
  } catch (e) {
    showError("Cannot reach the console's API: " + e.message);
    return;
  }
  window.addEventListener("hashchange", route);
  document.addEventListener("visibilitychange", () => { if (!document.hidden) refreshNow(); });
  route();
  // At most one request per second: tick() skips while one is in flight.
  setInterval(tick, 1000);
}

start();
