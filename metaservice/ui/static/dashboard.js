// The MetaService dashboard: reads the public REST API of the server that serves it.
//
// The topology comes from GET /lineage, every figure from GET /delay (SPEC §7); a selected job
// shows GET /jobs/{job}/progress, a selected table GET /delay/{table}, its barriers, its leases
// and its protected snapshots (the last two only when this server has those endpoints). All
// text goes into the page through textContent: nothing from the API is parsed as HTML.
"use strict";

(function () {
  const params = new URLSearchParams(window.location.search);
  const LAG_OK_MS = 1000 * Number(params.get("lag_ok") || 60);
  const LAG_WARN_MS = 1000 * Number(params.get("lag_warn") || 300);
  const TOKEN_KEY = "metaservice.token";

  const state = {
    cy: null,
    delay: null,
    lineage: null,
    plans: [],
    selected: null, // node id: "table:<name>" or "job:<name>"
    features: { leases: false, protected: false, plans: false },
    graphKey: "",
    refreshes: 0,
    timer: null,
    inFlight: false,
  };

  // -- small helpers ---------------------------------------------------------------------------

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined) continue;
      if (key === "class") node.className = value;
      else if (key.startsWith("data-")) node.setAttribute(key, value);
      else node[key] = value;
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.appendChild(typeof child === "string" || typeof child === "number"
        ? document.createTextNode(String(child)) : child);
    }
    return node;
  }

  function fmtDuration(ms) {
    if (ms === null || ms === undefined) return "—";
    const sign = ms < 0 ? "−" : "";
    const a = Math.abs(ms);
    if (a < 1000) return `${sign}${a} ms`;
    if (a < 60000) return `${sign}${(a / 1000).toFixed(1)} s`;
    if (a < 3600000) return `${sign}${(a / 60000).toFixed(1)} min`;
    if (a < 172800000) return `${sign}${(a / 3600000).toFixed(1)} h`;
    return `${sign}${(a / 86400000).toFixed(1)} d`;
  }

  function fmtTime(ms) {
    if (ms === null || ms === undefined) return "—";
    const d = new Date(ms);
    if (Number.isNaN(d.getTime())) return String(ms);
    return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
  }

  function fmtPercentiles(p) {
    if (!p || !p.count) return "—";
    return `${fmtDuration(p.p50)} / ${fmtDuration(p.p95)} / ${fmtDuration(p.p99)} (${p.count})`;
  }

  function lagClass(ms) {
    if (ms === null || ms === undefined) return "lag-none";
    if (ms <= LAG_OK_MS) return "lag-ok";
    if (ms <= LAG_WARN_MS) return "lag-warn";
    return "lag-bad";
  }

  function tablePath(name) {
    return name.split(".").map(encodeURIComponent).join("/");
  }

  function setStatus(text, isError) {
    const status = document.getElementById("status");
    status.textContent = text;
    status.classList.toggle("error", Boolean(isError));
  }

  class ApiError extends Error {
    constructor(status, body) {
      const detail = body && body.error ? `${body.error.code}: ${body.error.message}` : "";
      super(`HTTP ${status}${detail ? " — " + detail : ""}`);
      this.status = status;
      this.body = body;
    }
  }

  async function api(path) {
    const headers = { Accept: "application/json" };
    const token = window.sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = "Bearer " + token;
    const response = await fetch(path, { headers, cache: "no-store" });
    let body = null;
    try {
      body = await response.json();
    } catch (_) {
      body = null;
    }
    if (!response.ok) throw new ApiError(response.status, body);
    return body;
  }

  // -- the graph -------------------------------------------------------------------------------

  const GRAPH_STYLE = [
    { selector: "node", style: {
      "label": "data(label)", "font-size": 10, "text-wrap": "wrap", "text-valign": "bottom",
      "text-margin-y": 4, "color": "#1f2328", "border-width": 1, "border-color": "#57606a" } },
    { selector: "node.table", style: {
      "shape": "round-rectangle", "width": 26, "height": 18, "background-color": "#9aa0a6" } },
    { selector: "node.table.lag-ok", style: { "background-color": "#2e9d4b" } },
    { selector: "node.table.lag-warn", style: { "background-color": "#e0a100" } },
    { selector: "node.table.lag-bad", style: { "background-color": "#d33a2c" } },
    { selector: "node.job", style: {
      "shape": "ellipse", "width": 16, "height": 16, "background-color": "#3b6fd8" } },
    { selector: "node.fenced", style: { "border-width": 2, "border-style": "dashed",
                                        "border-color": "#1f2328" } },
    { selector: "node.bottleneck", style: {
      "border-width": 5, "border-color": "#d33a2c", "width": 24, "height": 24,
      "font-weight": "bold" } },
    { selector: "node.table-bottleneck", style: {
      "border-width": 5, "border-color": "#8250df", "border-style": "double" } },
    { selector: "node:selected", style: { "overlay-color": "#0969da", "overlay-opacity": 0.25,
                                          "overlay-padding": 6 } },
    { selector: "edge", style: {
      "width": 1.5, "line-color": "#8c959f", "target-arrow-color": "#8c959f",
      "target-arrow-shape": "triangle", "curve-style": "bezier", "arrow-scale": 0.8 } },
    { selector: "edge.critical", style: { "width": 3.5, "line-color": "#8250df",
                                          "target-arrow-color": "#8250df" } },
  ];

  function graphElements(lineage, delay) {
    const nodes = new Map();
    const edges = new Map();
    const tables = new Map(delay.tables.map((t) => [t.table, t]));
    const jobs = new Map(delay.jobs.map((j) => [j.job, j]));
    const addTable = (name) => {
      if (!nodes.has("table:" + name)) {
        nodes.set("table:" + name, { group: "nodes", classes: "table",
                                     data: { id: "table:" + name, name, kind: "table",
                                             label: shortName(name) } });
      }
    };
    for (const t of delay.tables) addTable(t.table);
    for (const t of lineage.tables) addTable(t.table);
    for (const job of lineage.jobs) {
      nodes.set("job:" + job.job, { group: "nodes", classes: "job",
                                    data: { id: "job:" + job.job, name: job.job, kind: "job",
                                            label: job.job } });
      for (const s of job.sources) {
        addTable(s);
        edges.set(`table:${s}>job:${job.job}`, { group: "edges", data: {
          id: `table:${s}>job:${job.job}`, source: "table:" + s, target: "job:" + job.job } });
      }
      for (const k of job.sinks) {
        addTable(k);
        edges.set(`job:${job.job}>table:${k}`, { group: "edges", data: {
          id: `job:${job.job}>table:${k}`, source: "job:" + job.job, target: "table:" + k } });
      }
    }
    return { nodes: [...nodes.values()], edges: [...edges.values()], tables, jobs };
  }

  function shortName(name) {
    const parts = name.split(".");
    return parts.length === 3 ? `${parts[1]}.${parts[2]}` : name;
  }

  function renderGraph() {
    if (typeof window.cytoscape !== "function") {
      throw new Error("the graph library did not load");
    }
    const { nodes, edges, tables, jobs } = graphElements(state.lineage, state.delay);
    const key = nodes.map((n) => n.data.id).sort().join("|") + "#" +
      edges.map((e) => e.data.id).sort().join("|");
    if (state.cy === null) {
      state.cy = window.cytoscape({
        container: document.getElementById("graph"), style: GRAPH_STYLE,
        minZoom: 0.05, maxZoom: 4,
      });
      state.cy.on("tap", "node", (event) => select(event.target.id()));
    }
    const cy = state.cy;
    if (key !== state.graphKey) {
      cy.batch(() => {
        cy.elements().remove();
        cy.add([...nodes, ...edges]);
      });
      const roots = cy.nodes(".table").filter((n) => n.indegree(false) === 0);
      cy.layout(nodes.length <= 400
        ? { name: "breadthfirst", directed: true, roots, spacingFactor: 1.1, animate: false,
            padding: 20 }
        : { name: "grid", animate: false, avoidOverlap: true, padding: 20 }).run();
      state.graphKey = key;
    }
    const fenced = new Set();
    for (const plan of state.plans) {
      if (plan.state === "applied") for (const t of plan.tables) fenced.add(t.table);
    }
    const bottleneck = state.delay.bottleneck ? state.delay.bottleneck.job : null;
    cy.batch(() => {
      cy.nodes(".table").forEach((node) => {
        const t = tables.get(node.data("name"));
        const lag = t ? t.lag_ms : null;
        node.data("lag", lag);
        node.data("label", `${shortName(node.data("name"))}\n${fmtDuration(lag)}`);
        node.removeClass("lag-ok lag-warn lag-bad lag-none");
        node.addClass(lagClass(lag));
        node.toggleClass("fenced", fenced.has(node.data("name")));
      });
      cy.nodes(".job").forEach((node) => {
        const j = jobs.get(node.data("name"));
        const lag = j ? j.local_lag_ms : null;
        node.data("lag", lag);
        node.data("label", `${node.data("name")}\n${fmtDuration(lag)}`);
        node.toggleClass("bottleneck", node.data("name") === bottleneck);
      });
    });
    document.body.dataset.bottleneck = bottleneck || "";
  }

  // -- the lists -------------------------------------------------------------------------------

  function renderLists() {
    const delay = state.delay;
    const bottleneck = delay.bottleneck ? delay.bottleneck.job : null;
    const tbody = document.querySelector("#tables tbody");
    const rows = [...delay.tables].sort((a, b) => (b.lag_ms ?? -Infinity) - (a.lag_ms ?? -Infinity)
                                         || a.table.localeCompare(b.table));
    tbody.replaceChildren(...rows.map((t) => {
      const row = el("tr", { "data-id": "table:" + t.table, "data-table": t.table,
                             "data-lag-class": lagClass(t.lag_ms) },
        el("td", {}, t.table),
        el("td", { class: lagClass(t.lag_ms) }, fmtDuration(t.lag_ms)),
        el("td", {}, fmtTime(t.latest_barrier)),
        el("td", {}, t.writer_job || "—"),
        el("td", {}, t.bottleneck_job || "—"),
        el("td", {}, fmtPercentiles(t.end_to_end_latency_ms)));
      row.classList.toggle("selected", state.selected === "table:" + t.table);
      return row;
    }));
    const jobRows = [...delay.jobs].sort((a, b) =>
      (b.local_lag_ms ?? -Infinity) - (a.local_lag_ms ?? -Infinity) || a.job.localeCompare(b.job));
    document.querySelector("#jobs tbody").replaceChildren(...jobRows.map((j) => {
      const row = el("tr", { "data-id": "job:" + j.job, "data-job": j.job },
        el("td", {}, j.job),
        el("td", {}, fmtDuration(j.local_lag_ms)),
        el("td", {}, fmtDuration(j.recent_hop_latency_ms)),
        el("td", {}, fmtPercentiles(j.hop_latency_ms)));
      row.classList.toggle("bottleneck", j.job === bottleneck);
      row.classList.toggle("selected", state.selected === "job:" + j.job);
      return row;
    }));
    document.querySelector("#plans tbody").replaceChildren(...state.plans.map((p) =>
      el("tr", { "data-id": "table:" + p.table },
        el("td", { title: p.id }, p.id.slice(0, 8)),
        el("td", {}, p.table),
        el("td", {}, fmtTime(p.barrier)),
        el("td", {}, p.mode + (p.reason ? " — " + p.reason : "")),
        el("td", {}, p.state))));
    const worst = rows.find((t) => t.lag_ms !== null && t.lag_ms !== undefined);
    document.getElementById("summary").textContent =
      `${delay.tables.length} tables, ${delay.jobs.length} running jobs` +
      (worst ? ` · worst lag ${fmtDuration(worst.lag_ms)} (${worst.table})` : "") +
      (bottleneck ? ` · bottleneck ${bottleneck}` : "");
  }

  // -- details of the selection ----------------------------------------------------------------

  function facts(pairs) {
    const dl = el("dl", { class: "facts" });
    for (const [k, v] of pairs) dl.append(el("dt", {}, k), el("dd", {}, v));
    return dl;
  }

  function section(title, content) {
    return [el("h3", {}, title), content];
  }

  function simpleTable(headers, rows) {
    if (!rows.length) return el("p", { class: "muted" }, "none");
    return el("table", {},
      el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", {}, h)))),
      el("tbody", {}, ...rows.map((r) => el("tr", {}, ...r.map((c) => el("td", {}, c))))));
  }

  async function optional(label, load) {
    try {
      return await load();
    } catch (error) {
      return el("p", { class: "muted" }, `${label} not available (${error.message})`);
    }
  }

  async function jobDetails(name) {
    const j = state.delay.jobs.find((x) => x.job === name);
    const parts = [];
    if (j) {
      parts.push(facts([
        ["sources", j.sources.join(", ") || "—"],
        ["sinks", j.sinks.join(", ") || "—"],
        ["local lag", fmtDuration(j.local_lag_ms)],
        ["recent barrier", fmtTime(j.recent_barrier)],
        ["recent hop latency", fmtDuration(j.recent_hop_latency_ms)],
        ["hop latency p50/p95/p99", fmtPercentiles(j.hop_latency_ms)],
      ]));
    }
    parts.push(...section("Recent barriers", await optional("progress", async () => {
      const body = await api(`/jobs/${encodeURIComponent(name)}/progress?limit=20`);
      return simpleTable(["barrier", "state", "started", "duration", "hop latency", "attempts"],
        body.progress.map((p) => [fmtTime(p.barrier), p.state, fmtTime(p.started_at),
                                  fmtDuration(p.duration_ms), fmtDuration(p.hop_latency_ms),
                                  String(p.attempts)]));
    })));
    return parts;
  }

  async function tableDetails(name) {
    const path = tablePath(name);
    const parts = [];
    const detail = await optional("delay", () => api(`/delay/${path}`));
    if (detail instanceof Node) {
      parts.push(detail);
    } else {
      highlightTable(detail);
      parts.push(facts([
        ["lag", fmtDuration(detail.lag_ms)],
        ["latest barrier", fmtTime(detail.latest_barrier)],
        ["bottleneck", detail.bottleneck ? `${detail.bottleneck.job} (local lag ` +
          `${fmtDuration(detail.bottleneck.local_lag_ms)})` : "—"],
        ["end-to-end p50/p95/p99", fmtPercentiles(detail.end_to_end_latency_ms)],
      ]));
      const hops = detail.path.map((h) => [h.job, `${h.source} → ${h.sink}`,
                                           fmtDuration(h.lag_ms),
                                           fmtDuration(h.recent_hop_latency_ms)]);
      if (detail.root) hops.push(["(ingestion)", detail.root.table, fmtDuration(detail.root.lag_ms), "—"]);
      parts.push(...section("Lag, hop by hop", simpleTable(["job", "hop", "adds", "recent hop"], hops)));
    }
    parts.push(...section("Barriers and snapshots", await optional("barriers", async () => {
      const body = await api(`/tables/${path}/barriers?limit=20`);
      return simpleTable(["barrier", "snapshot", "committed", "writer", ""],
        body.barriers.map((b) => [fmtTime(b.barrier), String(b.snapshot_id), fmtTime(b.committed_at),
                                  b.writer_job || "ingestion", b.rolled_back ? "rolled back" : ""]));
    })));
    if (state.features.leases) {
      parts.push(...section("Leases", await optional("leases", async () => {
        const body = await api(`/leases?table=${encodeURIComponent(name)}`);
        return simpleTable(["lease", "holder", "expires", "snapshots"],
          body.leases.map((l) => [l.lease_id.slice(0, 8), l.holder, fmtTime(l.expires_at),
                                  l.snapshots.filter((s) => s.table === name)
                                    .map((s) => String(s.snapshot_id)).join(", ")]));
      })));
    } else {
      parts.push(...section("Leases", el("p", { class: "muted" }, "not offered by this server")));
    }
    if (state.features.protected) {
      parts.push(...section("Protected snapshots", await optional("protections", async () => {
        const body = await api(`/tables/${path}/snapshots/protected`);
        return simpleTable(["snapshot", "barrier", "why"],
          body.snapshots.map((s) => [String(s.snapshot_id), fmtTime(s.barrier), s.reasons.join(", ")]));
      })));
    } else {
      parts.push(...section("Protected snapshots",
        el("p", { class: "muted" }, "not offered by this server")));
    }
    return parts;
  }

  function highlightTable(detail) {
    if (!state.cy) return;
    const cy = state.cy;
    cy.batch(() => {
      cy.elements(".critical").removeClass("critical");
      cy.nodes(".table-bottleneck").removeClass("table-bottleneck");
      for (const hop of detail.path) {
        cy.getElementById(`table:${hop.source}>job:${hop.job}`).addClass("critical");
        cy.getElementById(`job:${hop.job}>table:${hop.sink}`).addClass("critical");
      }
      if (detail.bottleneck) cy.getElementById("job:" + detail.bottleneck.job).addClass("table-bottleneck");
    });
    document.body.dataset.tableBottleneck = detail.bottleneck ? detail.bottleneck.job : "";
  }

  async function renderDetails() {
    const title = document.getElementById("details-title");
    const body = document.getElementById("details-body");
    if (!state.selected) return;
    const [kind, ...rest] = state.selected.split(":");
    const name = rest.join(":");
    title.textContent = `${kind === "job" ? "Job" : "Table"} ${name}`;
    const parts = kind === "job" ? await jobDetails(name) : await tableDetails(name);
    if (state.selected === `${kind}:${name}`) body.replaceChildren(...parts);
    document.body.dataset.selected = state.selected;
  }

  async function select(id) {
    state.selected = id;
    if (state.cy) {
      state.cy.elements(":selected").unselect();
      state.cy.getElementById(id).select();
      if (!id.startsWith("table:")) {
        state.cy.elements(".critical").removeClass("critical");
        state.cy.nodes(".table-bottleneck").removeClass("table-bottleneck");
        document.body.dataset.tableBottleneck = "";
      }
    }
    for (const row of document.querySelectorAll("tbody tr")) {
      row.classList.toggle("selected", row.dataset.id === id);
    }
    try {
      await renderDetails();
    } catch (error) {
      setStatus(`details: ${error.message}`, true);
    }
  }

  // -- refresh ---------------------------------------------------------------------------------

  async function detectFeatures() {
    try {
      const doc = await api("/openapi.json");
      const paths = doc.paths || {};
      state.features.leases = "/leases" in paths;
      state.features.protected = "/tables/{catalog}/{database}/{table}/snapshots/protected" in paths;
      state.features.plans = "/rollback-plans" in paths;
    } catch (_) {
      // Without the document, ask only for what every server has.
    }
  }

  async function refresh() {
    if (state.inFlight) return;
    state.inFlight = true;
    try {
      const [delay, lineage, plans] = await Promise.all([
        api("/delay"), api("/lineage"),
        state.features.plans ? api("/rollback-plans?limit=10").catch(() => ({ plans: [] }))
                             : Promise.resolve({ plans: [] }),
      ]);
      state.delay = delay;
      state.lineage = lineage;
      state.plans = plans.plans || [];
      renderGraph();
      renderLists();
      if (state.selected) await renderDetails();
      state.refreshes += 1;
      document.body.dataset.ready = "true";
      document.body.dataset.refreshes = String(state.refreshes);
      setStatus(`updated ${new Date().toLocaleTimeString()}`, false);
    } catch (error) {
      setStatus(error.status === 401 || error.status === 403
        ? "a reader token is needed: paste it above" : `refresh failed: ${error.message}`, true);
    } finally {
      state.inFlight = false;
    }
  }

  function schedule() {
    if (state.timer !== null) window.clearInterval(state.timer);
    state.timer = null;
    const period = Number(document.getElementById("refresh").value);
    if (period > 0) state.timer = window.setInterval(refresh, period);
  }

  function wire() {
    document.getElementById("legend-ok").textContent = `lag ≤ ${fmtDuration(LAG_OK_MS)}`;
    document.getElementById("legend-warn").textContent = `≤ ${fmtDuration(LAG_WARN_MS)}`;
    document.getElementById("legend-bad").textContent = `> ${fmtDuration(LAG_WARN_MS)}`;
    document.getElementById("refresh").addEventListener("change", schedule);
    document.getElementById("refresh-now").addEventListener("click", refresh);
    document.getElementById("token-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const input = document.getElementById("token");
      if (input.value) window.sessionStorage.setItem(TOKEN_KEY, input.value.trim());
      else window.sessionStorage.removeItem(TOKEN_KEY);
      input.value = "";
      detectFeatures().then(refresh);
    });
    document.getElementById("lists").addEventListener("click", (event) => {
      const row = event.target.closest("tr[data-id]");
      if (row) select(row.dataset.id);
    });
  }

  window.metaservice = { state, refresh, select, lagClass };

  wire();
  detectFeatures().then(refresh).then(schedule);
})();
