// The live page of `affinity web`: one server-sent event per sample (/events), rendered into
// tables and Chart.js charts. Every text from the server goes in with textContent (never as
// HTML): labels, channels and error messages come from other processes.
"use strict";

const pages = { queues: {}, streams: {} };
const charts = new Map();
let source = null;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function table(headers, rows, numeric, attrs) {
  const head = el("tr", {}, ...headers.map((h) => el("th", {}, h)));
  const body = rows.map((row) =>
    el("tr", {}, ...row.map((cell, i) => el("td", numeric && numeric[i] ? { class: "num" } : {}, cell))));
  return el("table", attrs || {}, el("thead", {}, head), el("tbody", {}, ...body));
}

function fmt(n) {
  return typeof n === "number" ? n.toLocaleString("en-US", { maximumFractionDigits: 1 }) : String(n ?? "-");
}

function clock(seconds) {
  return new Date(seconds * 1000).toTimeString().slice(0, 8);
}

// Replaces a node's children, leaving out the null ones (a part with nothing to show).
// The scroll positions of the node's scrolled tables are kept across the replacement.
function fill(node, ...children) {
  const scrolled = [...node.querySelectorAll(".scroll")].map((part) => part.scrollTop);
  node.replaceChildren(...children.filter((child) => child !== null && child !== undefined));
  node.querySelectorAll(".scroll").forEach((part, i) => { part.scrollTop = scrolled[i] || 0; });
}

function problem(text) {
  return text ? el("div", { class: "problem" }, text) : null;
}

// A card per group/driver/router, kept across updates (its chart keeps its canvas).
function card(container, key, title) {
  const id = "card-" + key;
  let node = document.getElementById(id);
  if (!node) {
    node = el("div", { class: "card", id },
      el("h3", {}, title),
      el("div", { class: "body" }),
      el("div", { class: "chart" }, el("canvas", {})));
    container.append(node);
  }
  node.dataset.seen = "1";
  return node;
}

function prune(container) {
  for (const node of [...container.children]) {
    if (node.dataset.seen !== "1") {
      const chart = charts.get(node.id);
      if (chart) { chart.destroy(); charts.delete(node.id); }
      node.remove();
    } else {
      delete node.dataset.seen;
    }
  }
}

function chart(node, series, names, unit) {
  const labels = (series.t || []).map(clock);
  let instance = charts.get(node.id);
  if (!instance) {
    const colors = ["#1f5fbf", "#d9730d", "#12733a", "#b3261e", "#6b3fa0", "#5f6b7a", "#0b7f86"];
    instance = new Chart(node.querySelector("canvas"), {
      type: "line",
      data: {
        labels,
        datasets: names.map((name, i) => ({
          label: name + " " + unit, data: series[name] || [], borderColor: colors[i % colors.length],
          pointRadius: 0, borderWidth: 1.5, tension: 0.2,
        })),
      },
      options: {
        animation: false, responsive: true, maintainAspectRatio: false,
        scales: { x: { ticks: { maxTicksLimit: 8 } }, y: { beginAtZero: true } },
        plugins: { legend: { position: "bottom", labels: { boxWidth: 12 } } },
      },
    });
    charts.set(node.id, instance);
    return;
  }
  instance.data.labels = labels;
  names.forEach((name, i) => { instance.data.datasets[i].data = series[name] || []; });
  instance.update("none");
}

function pager(kind, key, info) {
  if (info.pages <= 1) return null;
  const go = (delta) => () => {
    pages[kind][key] = Math.max(0, info.page + delta);
    connect();
  };
  const previous = el("button", { type: "button" }, "◀");
  const next = el("button", { type: "button" }, "▶");
  previous.disabled = info.page === 0;
  next.disabled = info.page + 1 >= info.pages;
  previous.addEventListener("click", go(-1));
  next.addEventListener("click", go(1));
  return el("div", { class: "pager" }, previous, `page ${info.page + 1} of ${info.pages} (${fmt(info.total)} rows)`, next);
}

function renderGroup(container, group) {
  const node = card(container, "group-" + group.name, `group ${group.name}`);
  node.dataset.group = group.name;
  const d = group.definition;
  const body = node.querySelector(".body");
  const live = group.members.filter((m) => m.live).length;
  const members = table(
    ["member", "role", "index/count", "endpoint", "last heard", "liveness"],
    group.members.map((m) => [m.name, m.role, m.role === "consumer" ? `${m.index}/${m.count}` : "",
      m.endpoint, `${fmt(m.last_heard_ms)} ms`, el("span", { class: m.live ? "live" : "dead" }, m.live ? "live" : "silent")]),
    null, { class: "members" });
  const owners = table(["owner", "queues"], group.owners.map((o) => [o.owner, o.queues]), [false, true],
    { class: "owners", "data-group": group.name });
  const queues = table(
    ["queue", "owner", "epoch", "state", "acked", "sent", "retained B", "lag"],
    group.queues.rows, [true, false, true, false, true, true, true, true], { class: "queues", "data-group": group.name });
  const moves = table(["time", "queue", "from", "to", "epoch", "cause", "why"],
    group.moves.map((m) => [clock(m.at), m.queue, m.from, m.to, m.epoch, el("span", { class: m.cause }, m.cause), m.why]),
    null, { class: "moves", "data-group": group.name });
  const totals = group.move_totals || {};
  fill(body,
    el("div", {}, `HP=${d.HP} HC=${fmt(d.HC)} QC=${fmt(d.QC)} QS=${fmt(d.QS)} · ${live} live members · `,
      group.authenticated ? `authenticated (secret: ${group.secret})` : "UNAUTHENTICATED",
      ` · moves seen: ${fmt(totals.failover || 0)} failover, ${fmt(totals.handoff || 0)} handoff`),
    problem(group.problem),
    el("div", { class: "grid" },
      el("div", {}, el("h4", {}, "Members"), members, el("h4", {}, "Owners"), owners),
      el("div", {}, el("h4", {}, "Moves (newest first)"), el("div", { class: "scroll" }, moves))),
    el("h4", {}, "Queues"), pager("queues", group.name, group.queues), el("div", { class: "scroll" }, queues),
    el("h4", {}, "Published and delivered (messages/s)"));
  chart(node, group.rates, ["published", "delivered"], "msg/s");
}

function renderDriver(container, driver) {
  const node = card(container, "driver-" + driver.dir, `driver ${driver.dir}`);
  const body = node.querySelector(".body");
  if (driver.pid === undefined) {
    fill(body, problem(driver.problem));
    node.querySelector(".chart").hidden = true;
    return;
  }
  node.querySelector(".chart").hidden = false;
  fill(body,
    el("div", {}, `pid ${driver.pid} · up since ${new Date(driver.start_ms).toISOString()} · heartbeat ${fmt(driver.heartbeat_age_ms)} ms ago`
      + ` · longest duty cycle ${driver.duty_cycle_max_ns === null ? "-" : fmt(driver.duty_cycle_max_ns / 1000)} µs`),
    problem(driver.problem),
    el("div", { class: "grid" },
      el("div", {}, el("h4", {}, "System counters"),
        el("div", { class: "scroll" }, table(["counter", "value"], driver.system.map((c) => [c[0], fmt(c[1])]), [false, true], { class: "system" }))),
      el("div", {},
        el("h4", {}, `Clients (${driver.clients.total})`),
        table(["client", "keepalive age"], driver.clients.rows.map((c) => [c[0], `${fmt(c[1])} ms`]), [true, true], { class: "clients" }),
        el("h4", {}, `Distinct errors (${driver.errors.total})`),
        el("div", { class: "scroll" }, table(["count", "first", "last", "message"],
          driver.errors.rows.map((e) => [e[0], new Date(e[1]).toISOString(), new Date(e[2]).toISOString(), e[3]]),
          [true, false, false, false], { class: "errors" })))),
    el("h4", {}, "Per-stream counters"), pager("streams", driver.dir, driver.streams),
    el("div", { class: "scroll" }, table(["counter", "session", "stream", "channel", "value", "rate B/s"],
      driver.streams.rows, [false, true, true, false, true, true], { class: "streams" })),
    el("h4", {}, "Rates (per second)"));
  chart(node, driver.rates, ["bytes_sent", "bytes_received", "datagrams_sent", "datagrams_received", "commands", "naks_sent", "retransmits"], "/s");
}

function renderRouter(container, router) {
  const node = card(container, "router-" + router.channel, `router reports on ${router.channel}`);
  const body = node.querySelector(".body");
  const parts = [problem(router.problem),
    router.bad_reports ? problem(`${router.bad_reports} reports refused; the last: ${router.last_error}`) : null];
  let rates = { t: [] };
  for (const n of router.nodes) {
    const s = n.status;
    rates = n.rates;
    parts.push(
      el("h4", {}, `node ${n.node}`), problem(n.problem),
      el("div", {}, `subjects ${fmt(s.subjects)} · subscribers ${fmt(s.subscribers)} · affinities ${fmt(s.affinities)} · routed ${fmt(s.routed)} · relayed ${fmt(s.relayed)}`
        + ` · moves ${fmt(n.moves)} · backlog ${fmt(s.backlog_bytes)} B · report ${n.age_s} s old`),
      el("div", { class: "grid" },
        el("div", {}, el("h4", {}, "Peers"), table(["peer", "state"],
          n.peers.map((p) => [p[0], el("span", { class: p[1] ? "live" : "dead" }, p[1] ? "up" : "down")]), null, { class: "peers" }),
        el("h4", {}, "Faucet assignments"), table(["topic", "action", "detail"], n.faucet, null, { class: "faucet" })),
        el("div", {}, el("h4", {}, "Events (newest first)"), el("div", { class: "scroll" },
          table(["time", "kind", "event"], n.events.map((e) => [clock(e[0]), e[1], e[2]]), null, { class: "events" })))));
  }
  fill(body, ...parts);
  chart(node, rates, ["relayed", "messages_sent"], "msg/s");
}

function render(data) {
  document.getElementById("updated").textContent = "updated " + clock(data.time);
  document.getElementById("registry").textContent = "registry " + data.registry;
  const problems = document.getElementById("registry-problems");
  problems.replaceChildren(...data.registry_problems.map((p) => el("li", {}, p)));
  const notes = {
    groups: data.groups.length ? "" : "No group is defined in this registry (affinity group create ...).",
    drivers: data.drivers.length ? "" : "No driver directory is watched (affinity web --dir DIR).",
    routers: data.routers.length ? "" : "No router channel is watched (affinity router --status CHANNEL, then affinity web --router CHANNEL).",
  };
  for (const [part, text] of Object.entries(notes)) document.getElementById(part + "-note").textContent = text;
  const groups = document.getElementById("groups");
  data.groups.forEach((g) => renderGroup(groups, g));
  prune(groups);
  const drivers = document.getElementById("drivers");
  data.drivers.forEach((d) => renderDriver(drivers, d));
  prune(drivers);
  const routers = document.getElementById("routers");
  data.routers.forEach((r) => renderRouter(routers, r));
  prune(routers);
}

function connect() {
  if (source) source.close();
  const state = document.getElementById("connection");
  source = new EventSource("/events?pages=" + encodeURIComponent(JSON.stringify(pages)));
  source.addEventListener("update", (event) => {
    state.textContent = "live";
    state.className = "state-ok";
    render(JSON.parse(event.data));
  });
  source.addEventListener("error", () => {
    state.textContent = "reconnecting…";
    state.className = "state-error";
  });
}

connect();
