// twisted-stalk web console. Plain JavaScript, no libraries, no build step.
// Everything shown comes from /api/v1/ (docs/web.md) and is written with
// textContent: job bodies and tube names are never parsed as markup.
"use strict";

const S = {
  me: null,          // /api/v1/whoami
  view: null,        // {refresh: async fn} of the page shown
  busy: false,       // a refresh is in flight (one request at a time)
  task: null,        // the running action being followed
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
    if (response.status === 401 && S.me && S.me.auth && path !== "login") {
      location.hash = "#/login";
    }
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

function duration(seconds) {
  seconds = Math.max(0, Math.floor(seconds));
  if (seconds < 60) return seconds + "s";
  const d = Math.floor(seconds / 86400), h = Math.floor(seconds % 86400 / 3600);
  const m = Math.floor(seconds % 3600 / 60), s = seconds % 60;
  if (d) return d + "d " + h + "h";
  if (h) return h + "h " + m + "m";
  return m + "m " + s + "s";
}

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}

function num(n) { return (n === null || n === undefined) ? "–" : Number(n).toLocaleString("en"); }

function tubeLink(name) {
  return el("a", { href: "#/tube/" + encodeURIComponent(name), text: name });
}

function jobLink(id) { return el("a", { href: "#/job/" + id, text: String(id) }); }

function preview(view) {
  if (view.kind === "text") {
    return el("span", { class: "text", text: view.data + (view.truncated ? " …" : "") });
  }
  return el("span", { class: "hex", text: "hex " + view.data + (view.truncated ? " …" : "") });
}

function canAct() { return Boolean(S.me && S.me.can_act); }

// A small line chart: one polyline per series, scaled to the largest value.
function spark(series, width, height) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  let top = 1;
  for (const s of series) for (const v of s.values) top = Math.max(top, v);
  for (const s of series) {
    if (s.values.length < 2) continue;
    const step = width / (s.values.length - 1);
    const points = s.values.map((v, i) =>
      `${(i * step).toFixed(1)},${(height - 1 - v / top * (height - 2)).toFixed(1)}`);
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", points.join(" "));
    line.setAttribute("class", "s-" + s.name);
    svg.append(line);
  }
  const title = document.createElementNS(ns, "title");
  title.textContent = series.map((s) =>
    `${s.name}: ${s.values.length ? s.values[s.values.length - 1] : 0}/s`).join(", ") +
    ` (peak ${top})`;
  svg.append(title);
  return svg;
}

function legend(names) {
  return el("div", { class: "legend" },
    names.map((n) => el("span", {}, el("i", { class: "s-" + n }), n)));
}

function last(values) { return values && values.length ? values[values.length - 1] : 0; }

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
    S.task = task;
    showTask(task);
    return task;
  }
  finishTask(task);
  if (done) done(task);
  refreshNow();
  return task;
}

function describeTask(task) {
  const skipped = task.skipped ? `, ${task.skipped} skipped` : "";
  if (task.kind === "put") return `Put job ${task.result.id} into ${task.result.tube}`;
  if (task.kind === "pause") return `Paused ${task.target} for ${task.result.pause}s`;
  if (task.kind === "unpause") return `Unpaused ${task.target}`;
  return `${task.kind} ${task.target}: ${task.done} job(s)${skipped}`;
}

function showTask(task) {
  const box = $("#task");
  const bar = el("progress", { max: Math.max(task.total, 1), value: task.done });
  replace(box, el("span", { text: `${task.kind} ${task.target}: ` }), bar,
    el("span", { text: ` ${num(task.done)} of ${num(task.total)}` }));
  box.hidden = false;
}

function finishTask(task) {
  $("#task").hidden = true;
  S.task = null;
  if (task.state === "failed") showError(`${task.kind} failed: ${task.error}`);
  else showNotice(describeTask(task));
}

async function followTask() {
  const data = await api("GET", "tasks/" + S.task.id);
  if (data.task.state === "running" || !data.task.finished) showTask(data.task);
  else finishTask(data.task);
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

// ----------------------------------------------------------------- overview

function overviewView() {
  const state = { sort: "name", order: "asc", offset: 0, limit: 50, filter: "" };
  const facts = el("dl", { class: "facts", id: "server-facts" });
  const chart = el("div", { id: "server-chart" });
  const filter = el("input", { type: "search", placeholder: "filter tubes", id: "tube-filter",
    oninput: () => { state.filter = filter.value; state.offset = 0; refreshNow(); } });
  const pager = el("span", { class: "pager" });
  const columns = [["name", "Tube"], ["ready", "Ready"], ["urgent", "Urgent"],
    ["reserved", "Reserved"], ["delayed", "Delayed"], ["buried", "Buried"],
    ["waiting", "Waiting"], [null, "Paused"], [null, "Put / delete per s"]];
  const head = el("tr", {}, columns.map(([key, label]) => el("th", {
    class: (key ? "sortable" : "") + (key && key !== "name" ? " num" : ""),
    data: key ? { sort: key } : {}, text: label,
    onclick: key ? () => {
      state.order = state.sort === key && state.order === "asc" ? "desc" : "asc";
      state.sort = key; state.offset = 0; refreshNow();
    } : null,
  })));
  const body = el("tbody");
  replace($("#main"),
    el("h1", { text: "Overview" }),
    el("div", { class: "grid" },
      el("div", { class: "card" }, el("h2", { text: "Server" }), facts),
      el("div", { class: "card" }, el("h2", { text: "Commands per second (server)" }), chart)),
    el("h2", { text: "Tubes" }),
    el("div", { class: "toolbar" }, filter, pager),
    el("table", { id: "tubes" }, el("thead", {}, head), body));

  async function refresh() {
    const q = new URLSearchParams({ sort: state.sort, order: state.order, offset: state.offset,
      limit: state.limit, filter: state.filter });
    const data = await api("GET", "overview?" + q);
    const s = data.server;
    const binlog = s.binlog.enabled
      ? `${s.binlog.writable ? "writing" : "NOT WRITABLE: " + s.binlog.problem}, ` +
        `${s.binlog.files} file(s), ${bytes(s.binlog.size_bytes)}`
      : "off (jobs are kept in memory only)";
    const rows = [
      ["Version", s.version], ["Uptime", duration(s.uptime)],
      ["Connections", `${num(s["current-connections"])} (${num(s["current-producers"])} producers, ` +
        `${num(s["current-workers"])} workers, ${num(s["current-waiting"])} waiting)`],
      ["Tubes", num(s["current-tubes"])],
      ["Jobs", `${num(s["current-jobs-ready"])} ready (${num(s["current-jobs-urgent"])} urgent), ` +
        `${num(s["current-jobs-reserved"])} reserved, ${num(s["current-jobs-delayed"])} delayed, ` +
        `${num(s["current-jobs-buried"])} buried`],
      ["Stored bodies", bytes(s.job_bytes)], ["Total jobs", num(s["total-jobs"])],
      ["Binlog", binlog], ["Drain mode", s.draining ? "ON: puts are refused" : "off"],
    ];
    replace(facts, rows.map(([k, v]) => [el("dt", { text: k }),
      el("dd", { data: { fact: k.toLowerCase() }, text: v })]));
    replace(chart, spark(["put", "reserve", "delete"].map((n) =>
      ({ name: n, values: data.rates[n] })), 420, 90),
      legend(["put", "reserve", "delete"]),
      el("div", { class: "muted", text: `now: ${last(data.rates.put)} put, ` +
        `${last(data.rates.reserve)} reserve, ${last(data.rates.delete)} delete per second; ` +
        `one sample every ${data.interval}s` }));
    for (const th of head.children) {
      th.classList.toggle("sorted", th.dataset.sort === state.sort);
      th.classList.toggle("desc", th.dataset.sort === state.sort && state.order === "desc");
    }
    replace(body, data.tubes.map((t) => el("tr", { data: { tube: t.name } },
      el("td", {}, tubeLink(t.name)),
      ["ready", "urgent", "reserved", "delayed", "buried", "waiting"].map((k) =>
        el("td", { class: "num", data: { col: k }, text: num(t[k]) })),
      el("td", { data: { col: "paused" } }, t.paused
        ? el("span", { class: "badge paused", text: "paused " + duration(t.pause_left) }) : ""),
      el("td", {}, spark([{ name: "put", values: t.rates.put },
        { name: "delete", values: t.rates.delete }], 160, 24)))));
    replace(pager, pagerControls(state, data.matched, `${num(data.matched)} of ` +
      `${num(data.total_tubes)} tubes`));
  }
  return { refresh };
}

function pagerControls(state, total, label) {
  const from = total ? state.offset + 1 : 0;
  const to = Math.min(total, state.offset + state.limit);
  return [
    el("button", { type: "button", "data-page": "prev", disabled: state.offset <= 0,
      onclick: () => { state.offset = Math.max(0, state.offset - state.limit); refreshNow(); },
      text: "‹ Prev" }),
    el("span", { class: "muted", "data-range": "", text: ` ${num(from)}–${num(to)} (${label}) ` }),
    el("button", { type: "button", "data-page": "next", disabled: to >= total,
      onclick: () => { state.offset += state.limit; refreshNow(); }, text: "Next ›" }),
  ];
}

// -------------------------------------------------------------------- tube

function tubeView(name) {
  const state = { state: "ready", sort: "id", order: "asc", offset: 0, limit: 50,
                  selected: new Set() };
  const enc = encodeURIComponent(name);
  const title = el("h1", {}, "Tube ", el("span", { id: "tube-name", text: name }));
  const badge = el("span", { id: "tube-badge" });
  const tabs = el("div", { class: "tabs toolbar", id: "state-tabs" });
  const sort = el("select", { id: "job-sort", onchange: () => {
    state.sort = sort.value; state.offset = 0; refreshNow(); } },
    [["id", "id"], ["queue", "queue order"], ["pri", "priority"], ["age", "age"],
     ["time-left", "time left"]].map(([v, t]) => el("option", { value: v, text: t })));
  const order = el("button", { type: "button", id: "job-order", text: "ascending",
    onclick: () => { state.order = state.order === "asc" ? "desc" : "asc";
      order.textContent = state.order === "asc" ? "ascending" : "descending"; refreshNow(); } });
  const pager = el("span", { class: "pager" });
  const body = el("tbody");
  const selectAll = el("input", { type: "checkbox", title: "select this page",
    onchange: () => { for (const box of body.querySelectorAll("input[type=checkbox]")) {
      box.checked = selectAll.checked;
      const id = Number(box.dataset.id);
      if (selectAll.checked) state.selected.add(id); else state.selected.delete(id);
    } updateSelection(); } });
  const selection = el("div", { class: "toolbar", id: "selection" });
  const searchBox = el("input", { type: "search", id: "search-text", placeholder: "text in body" });
  const searchOut = el("div", { id: "search-results" });
  const counts = el("p", { class: "muted", id: "tube-counts" });
  const chart = el("div", { id: "tube-chart" });

  function updateSelection() {
    const ids = [...state.selected];
    const label = el("span", { class: "muted", text: `${ids.length} selected` });
    if (!canAct()) { replace(selection, ids.length ? label : ""); return; }
    const moveTo = el("input", { id: "move-to", placeholder: "other tube", size: 14 });
    const clear = () => { state.selected.clear(); selectAll.checked = false; updateSelection(); };
    replace(selection, label,
      el("button", { type: "button", "data-action": "delete-selected", class: "danger",
        disabled: !ids.length, text: "Delete",
        onclick: () => act("jobs/delete", { ids }, clear) }),
      el("button", { type: "button", "data-action": "kick-selected", disabled: !ids.length,
        text: "Kick", onclick: () => act("jobs/kick", { ids }, clear) }),
      el("button", { type: "button", "data-action": "bury-selected", disabled: !ids.length,
        text: "Bury", onclick: () => act("jobs/bury", { ids }, clear) }),
      moveTo,
      el("button", { type: "button", "data-action": "move-selected", disabled: !ids.length,
        text: "Move", onclick: () => act("jobs/move", { ids, tube: moveTo.value.trim() }, clear) }));
  }

  function jobRow(job, selectable) {
    const box = selectable ? el("input", { type: "checkbox", "data-id": job.id,
      onchange: () => { if (box.checked) state.selected.add(job.id);
        else state.selected.delete(job.id); updateSelection(); } }) : null;
    if (box) box.checked = state.selected.has(job.id);
    return el("tr", { data: { job: job.id } },
      selectable ? el("td", {}, box) : null,
      el("td", { class: "num" }, jobLink(job.id)),
      selectable ? null : el("td", { text: job.state }),
      el("td", { class: "num", text: num(job.pri) }),
      el("td", { class: "num", text: duration(job.age) }),
      el("td", { class: "num", text: job.state === "reserved" || job.state === "delayed"
        ? duration(job.time_left) : "–" }),
      el("td", { class: "num", text: bytes(job.size) }),
      el("td", { class: "preview" }, preview(job.preview)));
  }

  async function search(event) {
    event.preventDefault();
    const q = searchBox.value;
    if (!q) return;
    replace(searchOut, el("p", { class: "muted", text: "Searching…" }));
    try {
      const data = await api("GET", `tubes/${enc}/search?` + new URLSearchParams({ q }));
      const why = data.complete ? "searched every job"
        : data.stopped === "limit" ? "stopped at the result limit"
          : `stopped after ${data.seconds}s (searched ids up to ${data.searched_to})`;
      replace(searchOut,
        el("p", { class: "muted", text: `${data.matches.length} match(es); ${why}` }),
        data.matches.length ? el("table", { id: "search-table" },
          el("thead", {}, el("tr", {}, ["Id", "State", "Pri", "Age", "Time left", "Size", "Body"]
            .map((h) => el("th", { text: h })))),
          el("tbody", {}, data.matches.map((j) => jobRow(j, false)))) : null);
    } catch (e) {
      replace(searchOut, el("p", { class: "badge bad", text: e.message }));
    }
  }

  const panels = [];
  if (canAct()) panels.push(tubeActions(name, enc, () => state));
  replace($("#main"),
    el("p", {}, el("a", { href: "#/", text: "‹ Overview" })),
    title, badge, counts, chart,
    tabs,
    el("div", { class: "toolbar" }, el("label", { text: "Sort by" }), sort, order, pager),
    selection,
    el("table", { id: "jobs" }, el("thead", {}, el("tr", {},
      el("th", {}, selectAll), ["Id", "Pri", "Age", "Time left", "Size", "Body"].map((h, i) =>
        el("th", { class: i < 5 ? "num" : "", text: h })))), body),
    el("h2", { text: "Search bodies" }),
    el("form", { class: "inline", onsubmit: search }, searchBox,
      el("button", { type: "submit", text: "Search" })),
    searchOut,
    panels);
  updateSelection();

  async function refresh() {
    const q = new URLSearchParams({ state: state.state, sort: state.sort, order: state.order,
      offset: state.offset, limit: state.limit });
    let data;
    try {
      data = await api("GET", `tubes/${enc}/jobs?` + q);
    } catch (e) {
      if (e.status === 404) {
        replace(counts, el("span", { class: "badge bad", text: "This tube does not exist " +
          "(any more): a tube lives while it has jobs or clients." }));
        replace(body);
        return;
      }
      throw e;
    }
    const t = data.tube;
    replace(badge, t.paused ? el("span", { class: "badge paused",
      text: `paused, ${duration(t.pause_left)} left` }) : "");
    counts.textContent = `${num(t.urgent)} urgent · ${num(t.waiting)} waiting · ` +
      `${num(t.watching)} watching · ${num(t.using)} using · ${num(t.total_jobs)} put in all`;
    replace(chart, spark([{ name: "put", values: t.rates.put },
      { name: "delete", values: t.rates.delete }], 420, 60), legend(["put", "delete"]));
    replace(tabs, ["ready", "delayed", "buried", "reserved"].map((s) => el("button", {
      type: "button", class: s === state.state ? "active" : "", data: { state: s },
      text: `${s} (${num(t[s])})`,
      onclick: () => { state.state = s; state.offset = 0; state.selected.clear();
        updateSelection(); refreshNow(); } })));
    replace(body, data.jobs.map((j) => jobRow(j, true)));
    replace(pager, pagerControls(state, data.total, `${num(data.total)} ${state.state}`));
  }
  return { refresh };
}

function tubeActions(name, enc, getState) {
  const field = (label, input) => el("label", {}, label + " ", input);
  const body = el("textarea", { id: "put-body", placeholder: "job body" });
  const encoding = el("select", { id: "put-encoding" },
    el("option", { value: "text", text: "text (UTF-8)" }), el("option", { value: "hex", text: "hex" }));
  const defaults = S.me.put_defaults;  // the server's one set (whoami)
  const pri = el("input", { id: "put-pri", type: "number", min: 0, value: defaults.pri, size: 10 });
  const delay = el("input", { id: "put-delay", type: "number", min: 0, value: defaults.delay, size: 6 });
  const ttr = el("input", { id: "put-ttr", type: "number", min: 0, value: defaults.ttr, size: 6 });
  const kickN = el("input", { id: "kick-bound", type: "number", min: 1, value: 10, size: 6 });
  const pauseFor = el("input", { id: "pause-seconds", type: "number", min: 1, value: 60, size: 6 });
  const flushState = el("select", { id: "flush-state" },
    ["buried", "delayed", "ready"].map((s) => el("option", { value: s, text: s })));
  const confirm = el("input", { id: "flush-confirm", placeholder: "type the tube's name" });
  const flushButton = el("button", { type: "submit", class: "danger", "data-action": "flush",
    disabled: true, text: "Flush" });
  confirm.addEventListener("input", () => { flushButton.disabled = confirm.value !== name; });
  const submit = (fn) => (event) => { event.preventDefault(); fn(); };
  return el("div", { class: "grid", id: "tube-actions" },
    el("div", { class: "card" }, el("h2", { text: "Put a job" }),
      el("form", { id: "put-form", onsubmit: submit(() => act(`tubes/${enc}/jobs`, {
        body: body.value, encoding: encoding.value, pri: Number(pri.value),
        delay: Number(delay.value), ttr: Number(ttr.value) }, () => { body.value = ""; })) },
        body, el("div", { class: "inline" }, field("encoding", encoding), field("pri", pri),
          field("delay", delay), field("ttr", ttr),
          el("button", { type: "submit", "data-action": "put", text: "Put" })))),
    el("div", { class: "card" }, el("h2", { text: "Kick and pause" }),
      el("form", { class: "inline", onsubmit: submit(() => act(`tubes/${enc}/kick`,
        { bound: Number(kickN.value) })) },
        el("span", { text: "Kick up to" }), kickN, el("span", { text: "buried (else delayed) jobs" }),
        el("button", { type: "submit", "data-action": "kick", text: "Kick" })),
      el("form", { class: "inline", onsubmit: submit(() => act(`tubes/${enc}/pause`,
        { delay: Number(pauseFor.value) })) },
        el("span", { text: "Pause for" }), pauseFor, el("span", { text: "seconds" }),
        el("button", { type: "submit", "data-action": "pause", text: "Pause" }),
        el("button", { type: "button", "data-action": "unpause", text: "Unpause",
          onclick: () => act(`tubes/${enc}/pause`, { delay: 0 }) }))),
    el("div", { class: "card" }, el("h2", { text: "Flush" }),
      el("p", { class: "muted", text: "Deletes every job of this tube in the chosen state. " +
        "Jobs a worker holds cannot be deleted." }),
      el("form", { class: "inline", onsubmit: submit(() => act(`tubes/${enc}/flush`,
        { state: flushState.value, confirm: confirm.value }, () => { confirm.value = "";
          flushButton.disabled = true; })) },
        flushState, confirm, flushButton)));
}

// --------------------------------------------------------------------- job

function jobView(id) {
  const main = $("#main");
  replace(main, el("p", {}, el("a", { href: "#/", text: "‹ Overview" })),
    el("h1", { text: `Job ${id}` }), el("div", { id: "job-detail" }));
  let shownBody = null;

  async function refresh() {
    let data;
    try {
      data = await api("GET", "jobs/" + id);
    } catch (e) {
      if (e.status === 404) {
        replace($("#job-detail"), el("p", { class: "badge bad", text: `There is no job ${id} ` +
          "(deleted, or never put)." }));
        return;
      }
      throw e;
    }
    const st = data.stats;
    const facts = el("dl", { class: "facts", id: "job-stats" },
      Object.entries(st).map(([k, v]) => [el("dt", { text: k }),
        el("dd", { data: { field: k } }, k === "tube" ? tubeLink(v) : String(v))]));
    const holder = data.holder ? el("p", { id: "job-holder" },
      `Reserved by ${data.holder.peer}, ${duration(data.holder.ttr_left)} of its TTR left ` +
      `(it holds ${data.holder.jobs_held} job(s)).`) : null;
    const ready = data.ready_in !== null ? el("p", { id: "job-ready-in",
      text: `Becomes ready in ${duration(data.ready_in)}.` }) : null;
    const actions = [];
    if (canAct()) {
      if (st.state === "buried" || st.state === "delayed") {
        actions.push(el("button", { type: "button", "data-action": "kick", text: "Kick",
          onclick: () => act("jobs/kick", { ids: [id] }) }));
      }
      if (st.state === "ready" || st.state === "delayed") {
        actions.push(el("button", { type: "button", "data-action": "bury", text: "Bury",
          onclick: () => act("jobs/bury", { ids: [id] }) }));
      }
      if (st.state !== "reserved") {
        actions.push(el("button", { type: "button", "data-action": "delete", class: "danger",
          text: "Delete", onclick: () => act("jobs/delete", { ids: [id] }) }));
      }
    }
    // The body does not change: keep it (and the reader's scroll) across refreshes.
    if (shownBody === null) {
      const b = data.body;
      shownBody = el("div", {},
        el("h2", { text: `Body (${bytes(b.size)}, ${b.kind})` }),
        el("pre", { class: "body", id: "job-body", text: b.data }),
        b.truncated ? el("p", { class: "muted" }, "Only the start is shown. ",
          el("a", { href: `/api/v1/jobs/${id}/body`, text: "Download the whole body" })) : null);
    }
    replace($("#job-detail"), el("div", { class: "grid" },
      el("div", { class: "card" }, facts), el("div", { class: "card" }, holder, ready,
        el("div", { class: "toolbar" }, actions))), shownBody);
  }
  return { refresh };
}

// ------------------------------------------------------------- connections

function connectionsView() {
  const state = { offset: 0, limit: 100 };
  const body = el("tbody");
  const pager = el("span", { class: "pager" });
  replace($("#main"), el("h1", { text: "Connections" }), el("div", { class: "toolbar" }, pager),
    el("table", { id: "connections" }, el("thead", {}, el("tr", {},
      ["Peer", "Uses", "Watches", "Waiting", "Kind", "Jobs held"].map((h) =>
        el("th", { text: h })))), body));
  async function refresh() {
    const data = await api("GET", "connections?" + new URLSearchParams(state));
    replace(body, data.connections.map((c) => el("tr", {},
      el("td", { text: c.peer }), el("td", {}, tubeLink(c.use)),
      el("td", {}, c.watch.flatMap((w, i) => i ? [", ", tubeLink(w)] : [tubeLink(w)])),
      el("td", { text: c.waiting ? "waiting" : "" }),
      el("td", { text: [c.producer && "producer", c.worker && "worker"].filter(Boolean).join(", ") }),
      el("td", {}, `${c.reserved_count} `, c.reserved.flatMap((id) => [jobLink(id), " "])))));
    replace(pager, pagerControls(state, data.total, `${num(data.total)} connections`));
  }
  return { refresh };
}

// ------------------------------------------------------------------ login

function loginView() {
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
        location.hash = "#/";
      } catch (e) { showError(e.message); }
    } }, user, password, el("button", { type: "submit", text: "Log in" }))));
  return { refresh: null };
}

// ------------------------------------------------------------------ routing

async function whoami() {
  S.me = await api("GET", "whoami");
  const who = $("#who");
  if (!S.me.auth) {
    replace(who, el("span", { class: "badge", id: "read-only",
      text: "read-only (no --web-auth)" }));
  } else if (S.me.user) {
    replace(who, el("span", { text: `${S.me.user} (${S.me.role})` }),
      el("button", { type: "button", id: "logout", text: "Log out", onclick: async () => {
        await api("POST", "logout", {}); S.me.user = null; location.hash = "#/login"; route(); } }));
  } else {
    replace(who, el("a", { href: "#/login", text: "Log in" }));
  }
}

function route() {
  clearMessages();
  const hash = location.hash.replace(/^#\/?/, "");
  const [page, ...rest] = hash.split("/");
  const arg = decodeURIComponent(rest.join("/"));
  if (S.me && S.me.auth && !S.me.user && page !== "login") {
    location.hash = "#/login";
    return;
  }
  if (page === "tube" && arg) S.view = tubeView(arg);
  else if (page === "job" && /^\d+$/.test(arg)) S.view = jobView(Number(arg));
  else if (page === "connections") S.view = connectionsView();
  else if (page === "login") S.view = loginView();
  else S.view = overviewView();
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
