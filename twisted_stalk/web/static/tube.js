// twisted-stalk web console: a tube's page and a job's page (console.js
// has the helpers, the other pages and the routing). Text goes in with
// textContent only: job bodies and tube names are never parsed as markup.
"use strict";

// -------------------------------------------------------------------- tube

const JOB_HEADINGS = ["Id", "State", "Pri", "Age", "Time left", "Size", "Body"];

// where: {state, page, sort, order} from the address (tubeHref).
function tubeView(name, start) {
  const state = { state: "ready", sort: "id", order: "asc", offset: 0, limit: 50,
                  selected: new Set() };
  const enc = encodeURIComponent(name);
  setTitle("Tube " + name);
  const title = el("h1", {}, "Tube ", el("span", { id: "tube-name", text: name }));
  const badge = el("span", { id: "tube-badge" });
  const tabs = el("span", { class: "tabs", id: "state-tabs" });
  const sort = el("select", { id: "job-sort",
    onchange: () => navigate({ sort: sort.value, page: 1 }) },
    [["id", "id"], ["queue", "queue order"], ["pri", "priority"], ["age", "age"],
     ["time-left", "time left"]].map(([v, t]) => el("option", { value: v, text: t })));
  const order = el("button", { type: "button", id: "job-order", text: "ascending",
    onclick: () => navigate({ order: state.order === "asc" ? "desc" : "asc", page: 1 }) });
  const pager = el("span", { class: "pager" });
  const body = el("tbody");
  const selectAll = el("input", { type: "checkbox", title: "select this page", id: "select-page",
    onchange: () => selectRows(body, selectAll.checked) });
  const selection = el("div", { class: "toolbar", id: "selection" });
  const searchBox = el("input", { type: "search", id: "search-text", placeholder: "text in body" });
  const searchEncoding = el("select", { id: "search-encoding" },
    el("option", { value: "text", text: "text" }), el("option", { value: "hex", text: "hex" }));
  const searchOut = el("div", { id: "search-results" });
  const counts = el("p", { class: "muted", id: "tube-counts" });
  const chart = el("div", { id: "tube-chart" });

  function where() {
    return { state: state.state, page: Math.floor(state.offset / state.limit) + 1,
             sort: state.sort, order: state.order };
  }

  // Change what the address says; the hashchange comes back through go().
  function navigate(change) { location.hash = tubeHref(name, Object.assign(where(), change)); }

  let built = false;
  function go(to) {
    if (to.state !== state.state) state.selected.clear();
    state.state = to.state;
    state.offset = (to.page - 1) * state.limit;
    state.sort = to.sort;
    state.order = to.order;
    sort.value = state.sort;
    order.textContent = state.order === "asc" ? "ascending" : "descending";
    S.lastTube = { name, hash: location.hash };
    updateSelection();
    if (built) refreshNow();  // else route() refreshes the new page
  }

  function selectRows(tbody, on) {
    for (const box of tbody.querySelectorAll("input[data-id]")) {
      const id = Number(box.dataset.id);
      if (on) state.selected.add(id); else state.selected.delete(id);
    }
    updateSelection();
  }

  // Every checkbox of a job (the page's and the search's) shows the selection.
  function syncBoxes() {
    for (const box of $("#main").querySelectorAll("input[data-id]")) {
      box.checked = state.selected.has(Number(box.dataset.id));
    }
    const boxes = [...body.querySelectorAll("input[data-id]")];
    selectAll.checked = boxes.length > 0 && boxes.every((b) => b.checked);
  }

  function clearSelection() { state.selected.clear(); updateSelection(); }

  async function bulk(path, extra) {
    const task = await act(path, Object.assign({ ids: [...state.selected] }, extra || {}));
    if (task && task.state !== "failed") clearSelection(); else updateSelection();
    if (searched) await runSearch();
  }

  function updateSelection(confirming) {
    syncBoxes();
    const n = state.selected.size;
    const label = el("span", { class: "muted", id: "selected-count",
      text: `${plural(n, "job")} selected` });
    if (!canAct()) { replace(selection, n ? label : ""); return; }
    if (confirming && n) {
      replace(selection, el("strong", { class: "confirm", id: "confirm-delete",
        text: `Delete ${plural(n, "job")}? This cannot be undone.` }),
      el("button", { type: "button", "data-action": "confirm-delete", class: "danger",
        text: `Delete ${plural(n, "job")}`, onclick: () => bulk("jobs/delete") }),
      el("button", { type: "button", "data-action": "cancel", text: "Cancel",
        onclick: () => updateSelection() }));
      return;
    }
    const moveTo = el("input", { id: "move-to", placeholder: "other tube", size: 14 });
    replace(selection, label,
      el("button", { type: "button", "data-action": "delete-selected", class: "danger",
        disabled: !n, text: "Delete…", onclick: () => updateSelection(true) }),
      el("button", { type: "button", "data-action": "kick-selected", disabled: !n,
        text: "Kick", onclick: () => bulk("jobs/kick") }),
      el("button", { type: "button", "data-action": "bury-selected", disabled: !n,
        text: "Bury", onclick: () => bulk("jobs/bury") }),
      moveTo,
      el("button", { type: "button", "data-action": "move-selected", disabled: !n,
        text: "Move", onclick: () => bulk("jobs/move", { tube: moveTo.value.trim() }) }),
      n ? el("button", { type: "button", "data-action": "clear-selection", text: "Clear",
        onclick: clearSelection }) : null);
  }

  function jobRow(job, showState) {
    const box = el("input", { type: "checkbox", "data-id": job.id,
      onchange: () => { if (box.checked) state.selected.add(job.id);
        else state.selected.delete(job.id); updateSelection(); } });
    box.checked = state.selected.has(job.id);
    return el("tr", { data: { job: job.id } },
      cell("Select", { class: "select" }, box),
      cell("Id", { class: "num" }, jobLink(job.id)),
      showState ? cell("State", { text: job.state }) : null,
      cell("Pri", { class: "num", text: num(job.pri) }),
      cell("Age", { class: "num", text: duration(job.age) }),
      cell("Time left", { class: "num", text: job.state === "reserved" || job.state === "delayed"
        ? duration(job.time_left) : "–" }),
      cell("Size", { class: "num", text: bytes(job.size) }),
      cell("Body", { class: "preview" }, preview(job.preview)));
  }

  function headings(showState, box) {
    return [el("th", { class: "select" }, box),
      JOB_HEADINGS.filter((h) => showState || h !== "State").map((h) =>
        el("th", { class: h === "Body" || h === "State" ? "" : "num", text: h }))];
  }

  // The results shown ({q, encoding}), searched again after an action on the selection.
  let searched = null;

  async function search(event) {
    event.preventDefault();
    searched = searchBox.value ? { q: searchBox.value, encoding: searchEncoding.value } : null;
    if (!searched) { replace(searchOut); return; }
    replace(searchOut, el("p", { class: "muted", text: "Searching…" }));
    await runSearch();
  }

  async function runSearch() {
    const q = searched.q;
    try {
      const data = await api("GET", `tubes/${enc}/search?` + new URLSearchParams(searched));
      const why = data.complete ? "searched every job"
        : data.stopped === "limit" ? "stopped at the result limit"
          : `stopped after ${data.seconds}s (searched ids up to ${data.searched_to})`;
      const rows = el("tbody", {}, data.matches.map((j) => jobRow(j, true)));
      const all = el("input", { type: "checkbox", id: "select-results",
        title: "select every result", onchange: () => selectRows(rows, all.checked) });
      replace(searchOut, el("div", { class: "card" },
        el("h2", {}, `Search results for “`, el("span", { text: q }), "”"),
        el("p", { class: "muted", id: "search-summary",
          text: `${plural(data.matches.length, "match", "matches")}; ${why}` }),
        data.matches.length ? table("search-table", headings(true, all), rows) : null,
        el("button", { type: "button", id: "search-close", text: "Close the results",
          onclick: () => { replace(searchOut); searchBox.value = ""; searched = null; } })));
      syncBoxes();
    } catch (e) {
      replace(searchOut, el("p", { class: "badge bad", text: e.message }));
    }
  }

  replace($("#main"),
    el("p", {}, el("a", { href: "#/", text: "‹ Overview" })),
    el("div", { class: "tube-head" },
      el("div", {}, el("div", { class: "title-row" }, title, badge), counts), chart),
    el("div", { class: "grid tools" },
      el("div", { class: "card", id: "search-card" }, el("h2", { text: "Search bodies" }),
        el("form", { class: "inline", id: "search-form", onsubmit: search },
          searchBox, searchEncoding, el("button", { type: "submit", text: "Search" }))),
      canAct() ? tubeActions(name, enc) : null),
    searchOut,
    el("div", { class: "toolbar" }, tabs, el("label", { for: "job-sort", text: "Sort by" }), sort,
      order, pager),
    selection,
    table("jobs", headings(false, selectAll), body));
  go(start);
  built = true;

  function query() {
    return new URLSearchParams({ state: state.state, sort: state.sort, order: state.order,
      offset: state.offset, limit: state.limit });
  }

  async function refresh() {
    const q = query();
    let data;
    try {
      data = await api("GET", `tubes/${enc}/jobs?` + q);
      if (!stillAsked(q, query)) return;
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
    replace(chart, rateChart([{ name: "put", values: t.rates.put },
      { name: "delete", values: t.rates.delete }],
      { width: 380, height: 90, unit: "jobs/s", interval: data.interval }),
      legend(["put", "delete"]));
    replace(tabs, TUBE_STATES.map((s) => el("a", {
      href: tubeHref(name, { state: s, sort: state.sort, order: state.order }),
      class: "tab" + (s === state.state ? " active" : ""), data: { state: s },
      text: `${s} (${num(t[s])})` })));
    replace(body, data.jobs.map((j) => jobRow(j, false)));
    syncBoxes();
    replace(pager, pagerControls(state, data.total, `${num(data.total)} ${state.state}`,
      (offset) => navigate({ page: Math.floor(offset / state.limit) + 1 })));
  }
  return { refresh, go, kind: "tube", name };
}

function tubeActions(name, enc) {
  const field = (label, input) =>
    el("label", { class: "field" }, el("span", { text: label }), input);
  const body = el("textarea", { id: "put-body", placeholder: "job body" });
  const encoding = el("select", { id: "put-encoding" },
    el("option", { value: "text", text: "text (UTF-8)" }),
    el("option", { value: "hex", text: "hex" }));
  const defaults = S.me.put_defaults;  // the server's one set (whoami)
  const pri = el("input", { id: "put-pri", class: "u32", type: "number", min: 0,
    max: 4294967295, value: defaults.pri });
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
  // display: contents: the cards take their places in the surrounding grid.
  return el("div", { id: "tube-actions" },
    el("div", { class: "card" }, el("h2", { text: "Put a job" }),
      el("form", { id: "put-form", onsubmit: submit(() => act(`tubes/${enc}/jobs`, {
        body: body.value, encoding: encoding.value, pri: Number(pri.value),
        delay: Number(delay.value), ttr: Number(ttr.value) }, () => { body.value = ""; })) },
        body, el("div", { class: "fields" }, field("encoding", encoding), field("priority", pri),
          field("delay (s)", delay), field("TTR (s)", ttr),
          el("button", { type: "submit", "data-action": "put", text: "Put" })))),
    el("div", { class: "card" }, el("h2", { text: "Kick and pause" }),
      el("form", { class: "inline", onsubmit: submit(() => act(`tubes/${enc}/kick`,
        { bound: Number(kickN.value) })) },
        el("label", { for: "kick-bound", text: "Kick up to" }), kickN,
        el("span", { text: "jobs", title: "buried ones if the tube has any, else delayed ones" }),
        el("button", { type: "submit", "data-action": "kick", text: "Kick" })),
      el("form", { class: "inline", onsubmit: submit(() => act(`tubes/${enc}/pause`,
        { delay: Number(pauseFor.value) })) },
        el("label", { for: "pause-seconds", text: "Pause for" }), pauseFor,
        el("span", { text: "seconds" }),
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

// The body as the reader wants it: JSON formatted (raw one click away),
// other text as it is, anything else as a hex dump with its ASCII.
function bodyView(b) {
  const pre = el("pre", { class: "body", id: "job-body" });
  const pretty = b.kind === "text" && !b.truncated ? prettyJson(b.data) : null;
  let kind = "text";
  const toggle = el("div", { class: "toolbar", id: "body-views" });
  function show(which) {
    kind = which;
    pre.className = "body" + (which === "hex" ? " hexdump" : "");
    pre.textContent = which === "json" ? pretty : which === "hex" ? hexDump(b.data) : b.data;
    pre.dataset.view = which;
    replace(toggle, pretty ? ["json", "text"].map((v) => el("button", { type: "button",
      class: v === kind ? "active" : "", "data-view": v,
      text: v === "json" ? "Formatted JSON" : "Raw text", onclick: () => show(v) })) : null);
  }
  show(pretty ? "json" : b.kind === "hex" ? "hex" : "text");
  const what = pretty ? "JSON" : b.kind === "hex" ? "binary, shown as hex and ASCII" : "text";
  return el("div", {},
    el("h2", { text: `Body (${bytes(b.size)}, ${what})` }), toggle, pre,
    b.truncated ? el("p", { class: "muted" }, "Only the start is shown. ",
      el("a", { href: `/api/v1/jobs/${b.id}/body`, text: "Download the whole body" })) : null);
}

function jobView(id) {
  setTitle(`Job ${id}`);
  const back = el("a", { id: "back", href: S.lastTube ? S.lastTube.hash : "#/",
    text: S.lastTube ? `‹ Tube ${S.lastTube.name}` : "‹ Overview" });
  replace($("#main"), el("p", {}, back), el("h1", { text: `Job ${id}` }),
    el("div", { id: "job-detail" }));
  let shownBody = null;
  let confirming = false;
  const actionBar = el("div", { class: "toolbar", id: "job-actions" });

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
    // Back to the job's tube: the very page it was listed on when it was one.
    const home = S.lastTube && S.lastTube.name === st.tube ? S.lastTube.hash
      : tubeHref(st.tube, { state: st.state });
    back.href = home;
    back.textContent = `‹ Tube ${st.tube}`;
    const facts = el("dl", { class: "facts", id: "job-stats" },
      Object.entries(st).map(([k, v]) => [el("dt", { text: k }),
        el("dd", { data: { field: k } }, k === "tube" ? tubeLink(v) : String(v))]));
    const holder = data.holder ? el("p", { id: "job-holder" },
      `Reserved by ${data.holder.peer}, ${duration(data.holder.ttr_left)} of its TTR left ` +
      `(it holds ${plural(data.holder.jobs_held, "job")}).`) : null;
    const ready = data.ready_in !== null ? el("p", { id: "job-ready-in",
      text: `Becomes ready in ${duration(data.ready_in)}.` }) : null;
    drawActions(st, home);
    // The body does not change: keep it (and the reader's scroll) across refreshes.
    if (shownBody === null) shownBody = bodyView(Object.assign({ id }, data.body));
    replace($("#job-detail"), el("div", { class: "grid" },
      el("div", { class: "card" }, facts), el("div", { class: "card" }, holder, ready,
        actionBar)), shownBody);
  }

  // Kick, bury, delete (which asks first) as the job's state allows.
  function drawActions(st, home) {
    const button = (action, text, onclick, danger) => el("button", { type: "button",
      "data-action": action, class: danger ? "danger" : null, text, onclick });
    const ask = (on) => { confirming = on; drawActions(st, home); };
    if (!canAct()) return;
    if (confirming && st.state !== "reserved") {
      replace(actionBar, el("strong", { class: "confirm", id: "confirm-delete",
        text: `Delete job ${id}? This cannot be undone.` }),
      button("confirm-delete", `Delete job ${id}`, () => { confirming = false;
        act("jobs/delete", { ids: [id] }, () => { location.hash = home; }); }, true),
      button("cancel", "Cancel", () => ask(false)));
      return;
    }
    replace(actionBar,
      st.state === "buried" || st.state === "delayed"
        ? button("kick", "Kick", () => act("jobs/kick", { ids: [id] })) : null,
      st.state === "ready" || st.state === "delayed"
        ? button("bury", "Bury", () => act("jobs/bury", { ids: [id] })) : null,
      st.state !== "reserved" ? button("delete", "Delete…", () => ask(true), true) : null);
  }
  return { refresh };
}
