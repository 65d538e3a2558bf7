// The MetaService dashboard: reads the public REST API of the server that serves it.
//
// The topology comes from GET /lineage, every figure from GET /delay (docs/contract.md#delay); a
// selected job shows GET /jobs/{job}/progress, a selected table GET /delay/{table}, its barriers,
// its leases and its protected snapshots (the last two only when this server has those endpoints).
// All text goes into the page through textContent: nothing from the API is parsed as HTML.
//
// Answers are parsed losslessly: snapshot ids are 64-bit integers, beyond what a JavaScript
// number holds exactly (2^53), so integers past Number.MAX_SAFE_INTEGER stay decimal strings.
// Every time shown is UTC. A barrier before 2000 is taken as a plain number, not a wall-clock
// time (the walk-through's 10, 20, 30): such a table shows "barrier not a timestamp" instead of
// a lag of decades.
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

  // -- lossless JSON ---------------------------------------------------------------------------

  const INTEGER = /^-?\d+$/;

  // JSON.parse passes a reviver the number's source text where the browser supports it
  // (Chromium 114+, Firefox 135+).
  const REVIVER_SEES_SOURCE = (() => {
    try {
      let source = null;
      JSON.parse("12345678901234567890", (key, value, context) => {
        source = context && context.source;
        return value;
      });
      return source === "12345678901234567890";
    } catch (_) {
      return false;
    }
  })();

  function parseWithSource(text) {
    return JSON.parse(text, (key, value, context) =>
      (typeof value === "number" && !Number.isSafeInteger(value) && context &&
       INTEGER.test(context.source)) ? context.source : value);
  }

  // Elsewhere: quote every integer literal beyond 2^53 - 1 outside strings, then JSON.parse.
  const NUMBER = /-?\d+(\.\d+)?([eE][+-]?\d+)?/y;

  function parseByScanning(text) {
    const out = [];
    let copied = 0;
    for (let i = 0; i < text.length; i += 1) {
      const c = text.charCodeAt(i);
      if (c === 34) { // '"': skip the string, escapes included
        i += 1;
        while (i < text.length && text.charCodeAt(i) !== 34) i += text.charCodeAt(i) === 92 ? 2 : 1;
      } else if (c === 45 || (c >= 48 && c <= 57)) { // '-' or a digit: a number starts
        NUMBER.lastIndex = i;
        const match = NUMBER.exec(text);
        if (!match) continue; // not JSON: JSON.parse below says so
        const token = match[0];
        if (!match[1] && !match[2] && !Number.isSafeInteger(Number(token))) {
          out.push(text.slice(copied, i), '"', token, '"');
          copied = i + token.length;
        }
        i += token.length - 1;
      }
    }
    out.push(text.slice(copied));
    return JSON.parse(out.join(""));
  }

  const parseJson = REVIVER_SEES_SOURCE ? parseWithSource : parseByScanning;

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
    if (typeof ms !== "number") return String(ms);
    const d = new Date(ms);
    if (Number.isNaN(d.getTime())) return String(ms);
    return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
  }

  // Barriers are milliseconds since the epoch by convention only; one before 2000 is a plain
  // counter (tests, walk-throughs), and "now − barrier" is then no lag at all.
  const WALL_CLOCK_FROM_MS = Date.UTC(2000, 0, 1);
  const NOT_A_TIME = "barrier not a timestamp";

  function isWallClock(barrier) {
    return typeof barrier === "number" && barrier >= WALL_CLOCK_FROM_MS;
  }

  // A barrier as a person reads it, to the millisecond: "2026-11-27 23:05:10.250 UTC" (the
  // demo and the command line print the same); a counter before 2000 as its number.
  function fmtBarrier(barrier) {
    if (barrier === null || barrier === undefined) return "—";
    if (!isWallClock(barrier)) return String(barrier);
    return new Date(barrier).toISOString().replace("T", " ").replace(/Z$/, " UTC");
  }

  // The same, followed by the integer the API and the commands take (a rollback plan's barrier,
  // /version/...?barrier=), selectable on its own.
  function barrierCell(barrier) {
    if (barrier === null || barrier === undefined || !isWallClock(barrier)) {
      return fmtBarrier(barrier);
    }
    return el("span", { class: "barrier" }, fmtBarrier(barrier), " ",
              el("code", { class: "barrier-integer", "data-barrier": String(barrier) },
                 String(barrier)));
  }

  // A table's lag, or null when its latest barrier is not a wall-clock time.
  function tableLag(t) {
    return t && t.latest_barrier !== null && t.latest_barrier !== undefined &&
      !isWallClock(t.latest_barrier) ? null : (t ? t.lag_ms : null);
  }

  function fmtTableLag(t) {
    return t && t.latest_barrier !== null && t.latest_barrier !== undefined &&
      !isWallClock(t.latest_barrier) ? NOT_A_TIME : fmtDuration(t ? t.lag_ms : null);
  }

  function fmtClockUtc(date) {
    return date.toISOString().slice(11, 19) + " UTC";
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

  // What holds a table's strong cut (GET /delay's held_back_by): the catching-up table, the job
  // writing it and for how long, as "held by job B (lake.db.t2) for 5.0 min".
  function fmtHold(hold, now) {
    const who = hold.writer_job ? `job ${hold.writer_job} (${hold.table})` : hold.table;
    const since = hold.writer_started_at;
    return `held by ${who}` +
      (since !== null && since !== undefined && now ? ` for ${fmtDuration(now - since)}` : "");
  }

  function fmtHolds(holds, now) {
    return holds.map((h) => fmtHold(h, now)).join("; ") +
      ` at barrier ${fmtBarrier(holds[0].catch_up_floor)}`;
  }

  // The badge beside a table whose strong cut is held, or nothing.
  function heldBadges(holds, now) {
    if (!holds || !holds.length) return [];
    return [" ", el("span", { class: "badge bad held",
                              "data-held-by": holds.map((h) => h.table).join(" "),
                              title: "strong reads of this pipeline stay at that barrier until " +
                                "every catching-up table has caught up" },
                    "strong cut " + fmtHolds(holds, now))];
  }

  // -- table names -----------------------------------------------------------------------------
  //
  // The API writes a table as one dotted string (metaservice_names): catalog, namespace levels
  // (one or more), table, joined by dots, a part holding anything beyond letters, digits, "_" and
  // "-" in backticks (a backtick inside doubled): lake.db.t, lake.a.b.t, lake.`sales dept`.`t.v2`.

  const DOTTED_PART = /`((?:[^`]|``)*)`|([^.`]*)/y;
  const PLAIN_PART = /^[A-Za-z0-9_][A-Za-z0-9_-]*$/;

  // The parts of a dotted name, backticks undone (metaservice_names.split_dotted).
  function splitDotted(text) {
    const parts = [];
    let at = 0;
    for (;;) {
      DOTTED_PART.lastIndex = at;
      const match = DOTTED_PART.exec(text); // the second branch matches the empty string
      parts.push(match[1] !== undefined ? match[1].replaceAll("``", "`") : match[2]);
      at = DOTTED_PART.lastIndex;
      if (at === text.length) return parts;
      if (text[at] !== ".") throw new Error(`malformed name ${text}: a backtick at ${at}`);
      at += 1;
    }
  }

  // Parts written as one dotted name (metaservice_names.dotted).
  function dotted(parts) {
    return parts.map((p) => (PLAIN_PART.test(p) ? p : "`" + p.replaceAll("`", "``") + "`"))
      .join(".");
  }

  // A table's URL path in the REST API: catalog/namespace/table, each percent-encoded, the
  // namespace's levels joined by the unit separator (%1F), as the Iceberg REST spec has it.
  function tablePath(name) {
    const parts = splitDotted(name);
    return [parts[0], parts.slice(1, -1).join("\x1f"), parts[parts.length - 1]]
      .map(encodeURIComponent).join("/");
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
      body = parseJson(await response.text());
    } catch (_) {
      body = null;
    }
    if (!response.ok) throw new ApiError(response.status, body);
    return body;
  }

  // -- the graph -------------------------------------------------------------------------------
  //
  // Every label sits inside its node, which is sized to fit it, and the layout is layered from
  // top to bottom: an edge leaves the bottom of one node and enters the top of the next, and an
  // edge that skips layers runs through a lane kept free in each layer it crosses. So no edge
  // crosses a label, and the labels never overlap each other.

  const FONT_SIZE = 11;
  const LINE_HEIGHT = 1.3;
  const FONT_FAMILY = "Helvetica, Arial, sans-serif";
  const PAD_X = 8;
  const PAD_Y = 5;
  const JOB_EXTRA_X = 10; // jobs are pills: their rounded ends need room
  const GAP_X = 28; // between two nodes of a layer
  const GAP_Y = 38; // between layers: room for the arrows
  const LANE = 10; // the width a long edge keeps free in a layer it crosses

  const GRAPH_STYLE = [
    { selector: "node", style: {
      "label": "data(label)", "font-size": FONT_SIZE, "font-family": FONT_FAMILY,
      "line-height": LINE_HEIGHT, "text-wrap": "wrap", "text-valign": "center",
      "text-halign": "center", "width": "data(w)", "height": "data(h)",
      "shape": "round-rectangle", "corner-radius": 4, "color": "#ffffff",
      "border-width": 1, "border-color": "#57606a" } },
    { selector: "node.table", style: { "background-color": "#9aa0a6", "color": "#1f2328" } },
    { selector: "node.table.lag-ok", style: { "background-color": "#2e9d4b", "color": "#ffffff" } },
    { selector: "node.table.lag-warn", style: { "background-color": "#e0a100", "color": "#1f2328" } },
    { selector: "node.table.lag-bad", style: { "background-color": "#d33a2c", "color": "#ffffff" } },
    { selector: "node.job", style: { "background-color": "#3b6fd8", "corner-radius": 16 } },
    { selector: "node.fenced", style: { "border-width": 2, "border-style": "dashed",
                                        "border-color": "#1f2328" } },
    { selector: "node.bottleneck", style: {
      "border-width": 4, "border-color": "#d33a2c", "font-weight": "bold" } },
    { selector: "node.table-bottleneck", style: {
      "border-width": 5, "border-color": "#8250df", "border-style": "double" } },
    { selector: "node:selected", style: { "overlay-color": "#0969da", "overlay-opacity": 0.25,
                                          "overlay-padding": 6 } },
    { selector: "edge", style: {
      "width": 1.5, "line-color": "#8c959f", "target-arrow-color": "#8c959f",
      "target-arrow-shape": "triangle", "curve-style": "straight", "arrow-scale": 0.9 } },
    { selector: "edge.routed", style: { "curve-style": "segments",
                                        "edge-distances": "node-position" } },
    { selector: "edge.critical", style: { "width": 3.5, "line-color": "#8250df",
                                          "target-arrow-color": "#8250df" } },
  ];

  let measuring = null;

  // The box a label needs inside its node (measured in bold: the widest it is ever drawn).
  function labelBox(label, job) {
    if (measuring === null) measuring = document.createElement("canvas").getContext("2d");
    measuring.font = `bold ${FONT_SIZE}px ${FONT_FAMILY}`;
    const lines = String(label).split("\n");
    const width = Math.max(...lines.map((line) => measuring.measureText(line).width));
    return { w: Math.ceil(width) + 2 * PAD_X + (job ? JOB_EXTRA_X : 0),
             h: Math.ceil(lines.length * FONT_SIZE * LINE_HEIGHT) + 2 * PAD_Y };
  }

  function graphElements(lineage, delay) {
    const nodes = new Map();
    const edges = new Map();
    const tables = new Map(delay.tables.map((t) => [t.table, t]));
    const jobs = new Map(delay.jobs.map((j) => [j.job, j]));
    const addTable = (name) => {
      if (!nodes.has("table:" + name)) {
        const label = shortName(name);
        nodes.set("table:" + name, { group: "nodes", classes: "table",
                                     data: { id: "table:" + name, name, kind: "table", label,
                                             ...labelBox(label, false) } });
      }
    };
    // A table no running job reads or writes and that has no data is a registration only (a job
    // planned and never started, or refused at its start): not part of any pipeline, not drawn.
    const inTopology = new Set(lineage.tables.map((t) => t.table));
    const unplaced = [];
    for (const t of delay.tables) {
      if (inTopology.has(t.table) || t.latest_barrier !== null) addTable(t.table);
      else unplaced.push(t.table);
    }
    for (const t of lineage.tables) addTable(t.table);
    for (const job of lineage.jobs) {
      nodes.set("job:" + job.job, { group: "nodes", classes: "job",
                                    data: { id: "job:" + job.job, name: job.job, kind: "job",
                                            label: job.job, ...labelBox(job.job, true) } });
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
    return { nodes: [...nodes.values()], edges: [...edges.values()], tables, jobs, unplaced };
  }

  // A table's name without its catalog (namespace levels and table), for the graph's labels.
  function shortName(name) {
    const parts = splitDotted(name);
    return parts.length >= 3 ? dotted(parts.slice(1)) : name;
  }

  // Positions of the nodes, and the waypoints of the edges that skip layers: a small layered
  // (Sugiyama-style) layout over the job/table DAG.
  // The graph's connected components, each laid out in layers, then packed left to right in
  // shelves no wider than the panel at zoom 1 (a component wider than that gets a shelf of its
  // own): unrelated pipelines and lone tables wrap into rows instead of one long row that only
  // fits the panel at a zoom where no label can be read.
  function layered(cy) {
    const ids = cy.nodes().map((n) => n.id()).sort();
    const part = new Map(ids.map((id) => [id, id]));
    const find = (id) => (part.get(id) === id ? id : find(part.get(id)));
    cy.edges().forEach((e) => { part.set(find(e.source().id()), find(e.target().id())); });
    const groups = new Map();
    for (const id of ids) {
      const root = find(id);
      if (!groups.has(root)) groups.set(root, []);
      groups.get(root).push(id);
    }
    const laid = [...groups.values()].map((members) => {
      const one = layeredPart(cy, new Set(members));
      const boxes = members.map((id) => {
        const p = one.positions.get(id);
        const n = cy.getElementById(id);
        return { x1: p.x - n.data("w") / 2, x2: p.x + n.data("w") / 2,
                 y1: p.y - n.data("h") / 2, y2: p.y + n.data("h") / 2 };
      });
      const box = { x1: Math.min(...boxes.map((b) => b.x1)), x2: Math.max(...boxes.map((b) => b.x2)),
                    y1: Math.min(...boxes.map((b) => b.y1)), y2: Math.max(...boxes.map((b) => b.y2)) };
      return { ...one, members, box, w: box.x2 - box.x1, h: box.y2 - box.y1, first: members[0] };
    });
    // the largest components first, then by name: the same page lays out the same way
    laid.sort((a, b) => b.members.length - a.members.length || a.first.localeCompare(b.first));
    const panel = Math.max(320, cy.width() - 2 * FIT_PADDING);
    const shelfWidth = Math.max(panel, ...laid.map((c) => c.w));
    const positions = new Map();
    const waypoints = new Map();
    let x = 0;
    let y = 0;
    let shelf = 0;
    for (const c of laid) {
      if (x > 0 && x + c.w > shelfWidth) {
        x = 0;
        y += shelf + GAP_Y;
        shelf = 0;
      }
      const dx = x - c.box.x1;
      const dy = y - c.box.y1;
      for (const [id, p] of c.positions) positions.set(id, { x: p.x + dx, y: p.y + dy });
      for (const [id, points] of c.waypoints) {
        waypoints.set(id, points.map((p) => ({ x: p.x + dx, y: p.y + dy })));
      }
      x += c.w + 2 * GAP_X;
      shelf = Math.max(shelf, c.h);
    }
    return { positions, waypoints };
  }

  // One connected component, laid out in layers.
  function layeredPart(cy, members) {
    const ids = [...members].sort();
    const item = new Map(ids.map((id) => [id, {
      key: id, real: true, w: cy.getElementById(id).data("w"), h: cy.getElementById(id).data("h"),
      up: [], down: [], layer: 0 }]));
    const links = cy.edges().filter((e) => members.has(e.source().id()))
      .map((e) => ({ id: e.id(), s: item.get(e.source().id()), t: item.get(e.target().id()) }))
      .sort((a, b) => a.id.localeCompare(b.id));
    // 1. Layers: the longest path from a root (Kahn's order; the server refuses cycles, a node on
    // one would stay in layer 0). A root then moves down to just above its first reader.
    const out = new Map(ids.map((id) => [id, []]));
    const indegree = new Map(ids.map((id) => [id, 0]));
    for (const link of links) {
      out.get(link.s.key).push(link);
      indegree.set(link.t.key, indegree.get(link.t.key) + 1);
    }
    const queue = ids.filter((id) => indegree.get(id) === 0);
    for (let i = 0; i < queue.length; i += 1) {
      const from = item.get(queue[i]);
      for (const link of out.get(from.key)) {
        link.t.layer = Math.max(link.t.layer, from.layer + 1);
        indegree.set(link.t.key, indegree.get(link.t.key) - 1);
        if (indegree.get(link.t.key) === 0) queue.push(link.t.key);
      }
    }
    const read = new Set(links.map((l) => l.t.key));
    for (const id of ids) {
      const readers = out.get(id).map((l) => l.t.layer);
      if (readers.length && !read.has(id)) item.get(id).layer = Math.min(...readers) - 1;
    }
    const depth = Math.max(0, ...[...item.values()].map((n) => n.layer)) + 1;
    const rows = Array.from({ length: depth }, () => []);
    for (const id of ids) rows[item.get(id).layer].push(item.get(id));
    // 2. An edge that skips layers gets a lane in each layer between its ends.
    const lanes = new Map();
    for (const link of links) {
      if (link.t.layer <= link.s.layer) continue; // only on a cycle
      let previous = link.s;
      const lane = [];
      for (let l = link.s.layer + 1; l < link.t.layer; l += 1) {
        const dummy = { key: `${link.id}#${l}`, real: false, w: LANE, h: 0, up: [], down: [],
                        layer: l };
        rows[l].push(dummy);
        lane.push(dummy);
        previous.down.push(dummy);
        dummy.up.push(previous);
        previous = dummy;
      }
      previous.down.push(link.t);
      link.t.up.push(previous);
      if (lane.length) lanes.set(link.id, lane);
    }
    // 3. Order in each layer: barycentre sweeps, down then up.
    const number = (row) => row.forEach((n, i) => { n.pos = i; });
    rows.forEach(number);
    const centre = (n, side) => (n[side].length
      ? n[side].reduce((sum, m) => sum + m.pos, 0) / n[side].length : n.pos);
    for (let pass = 0; pass < 9; pass += 1) {
      const down = pass % 2 === 0;
      for (let k = 1; k < depth; k += 1) {
        const row = rows[down ? k : depth - 1 - k];
        const side = down ? "up" : "down";
        const wanted = new Map(row.map((n) => [n, centre(n, side)]));
        row.sort((a, b) => wanted.get(a) - wanted.get(b) || a.pos - b.pos);
        number(row);
      }
    }
    // 4. x: pack each layer, then pull every node toward its neighbours, keeping the order and
    // the gaps (placing left to right and right to left, then averaging, keeps both).
    const apart = (a, b) => a.w / 2 + (a.real && b.real ? GAP_X : GAP_X / 2) + b.w / 2;
    for (const row of rows) {
      row.forEach((n, i) => { n.x = i ? row[i - 1].x + apart(row[i - 1], n) : 0; });
      const middle = row.length ? row[row.length - 1].x / 2 : 0;
      row.forEach((n) => { n.x -= middle; });
    }
    for (let pass = 0; pass < 10; pass += 1) {
      for (let k = 0; k < depth; k += 1) {
        const row = rows[pass % 2 === 0 ? k : depth - 1 - k];
        const want = row.map((n) => {
          const near = [...n.up, ...n.down];
          return near.length ? near.reduce((sum, m) => sum + m.x, 0) / near.length : n.x;
        });
        const left = [];
        const right = [];
        row.forEach((n, i) => { left[i] = i ? Math.max(want[i], left[i - 1] + apart(row[i - 1], n)) : want[i]; });
        for (let i = row.length - 1; i >= 0; i -= 1) {
          right[i] = i < row.length - 1 ? Math.min(want[i], right[i + 1] - apart(row[i], row[i + 1]))
            : want[i];
        }
        row.forEach((n, i) => { n.x = (left[i] + right[i]) / 2; });
      }
    }
    // 5. y: layers top to bottom, each as tall as its tallest node. A lane enters its layer at
    // the top and leaves it at the bottom, so it never runs beside a node's label.
    const top = [];
    const height = [];
    let y = 0;
    rows.forEach((row, l) => {
      height[l] = Math.max(0, ...row.map((n) => n.h));
      top[l] = y;
      y += height[l] + GAP_Y;
    });
    const positions = new Map(ids.map((id) => {
      const n = item.get(id);
      return [id, { x: n.x, y: top[n.layer] + height[n.layer] / 2 }];
    }));
    const waypoints = new Map([...lanes].map(([id, lane]) => [id, lane.flatMap((d) =>
      (height[d.layer] > 0 ? [{ x: d.x, y: top[d.layer] }, { x: d.x, y: top[d.layer] + height[d.layer] }]
                           : [{ x: d.x, y: top[d.layer] }]))]));
    return { positions, waypoints };
  }

  function layout(cy) {
    const { positions, waypoints } = layered(cy);
    cy.batch(() => {
      cy.nodes().forEach((node) => {
        node.position(positions.get(node.id()));
        node.data("laidOutWidth", node.data("w"));
      });
      cy.edges().forEach((edge) => {
        const points = waypoints.get(edge.id());
        if (!points) {
          edge.removeClass("routed");
          edge.removeStyle("segment-weights segment-distances");
          return;
        }
        // Each waypoint as cytoscape's segments take it: a weight along the line from the
        // source's centre to the target's, and a distance off that line.
        const s = positions.get(edge.source().id());
        const t = positions.get(edge.target().id());
        const dx = t.x - s.x;
        const dy = t.y - s.y;
        const length = Math.hypot(dx, dy) || 1;
        edge.addClass("routed");
        edge.style({
          "segment-weights": points.map((p) => ((p.x - s.x) * dx + (p.y - s.y) * dy) /
                                               (length * length)).join(" "),
          "segment-distances": points.map((p) => ((p.y - s.y) * dx - (p.x - s.x) * dy) /
                                                 length).join(" "),
        });
      });
    });
    fitGraph();
  }

  // The graph fits its panel at a zoom where labels stay legible: below MIN_ZOOM (11 px text
  // drawn at 10 px), the panel grows as tall as the graph needs at that zoom instead, and the
  // page scrolls; a graph still too wide at it is shown from its left edge, to be panned
  // (drag) or zoomed (wheel).
  const FIT_PADDING = 24;
  const MIN_ZOOM = 0.9;
  const MAX_ZOOM = 1.6;

  function fitGraph() {
    const cy = state.cy;
    if (!cy || !cy.nodes().length) return;
    const container = document.getElementById("graph");
    const box = cy.elements().boundingBox();
    const fits = (w, h) => Math.min((w - 2 * FIT_PADDING) / box.w, (h - 2 * FIT_PADDING) / box.h);
    const height = Math.ceil(box.h * MIN_ZOOM + 2 * FIT_PADDING);
    if (fits(cy.width(), cy.height()) < MIN_ZOOM && cy.height() < height) {
      container.style.height = `${height}px`;
      document.querySelector("main").classList.add("grown");
      cy.resize();
    }
    cy.fit(undefined, FIT_PADDING);
    if (cy.zoom() > MAX_ZOOM) {
      cy.zoom(MAX_ZOOM);
      cy.center();
    } else if (cy.zoom() < MIN_ZOOM) {
      cy.zoom(MIN_ZOOM);
      cy.pan({ x: FIT_PADDING - box.x1 * MIN_ZOOM, y: FIT_PADDING - box.y1 * MIN_ZOOM });
    }
    document.body.dataset.graphZoom = cy.zoom().toFixed(3);
  }

  function renderGraph() {
    if (typeof window.cytoscape !== "function") {
      throw new Error("the graph library did not load");
    }
    const { nodes, edges, tables, jobs, unplaced } = graphElements(state.lineage, state.delay);
    state.unplaced = unplaced;
    const key = nodes.map((n) => n.data.id).sort().join("|") + "#" +
      edges.map((e) => e.data.id).sort().join("|");
    if (state.cy === null) {
      state.cy = window.cytoscape({
        container: document.getElementById("graph"), style: GRAPH_STYLE,
        minZoom: 0.05, maxZoom: 4,
      });
      state.cy.on("tap", "node", (event) => select(event.target.id()));
      state.cy.on("resize", fitGraph); // the container follows the window
    }
    const cy = state.cy;
    const changed = key !== state.graphKey;
    if (changed) {
      cy.batch(() => {
        cy.elements().remove();
        cy.add([...nodes, ...edges]);
      });
      state.graphKey = key;
    }
    const fenced = new Set();
    for (const plan of state.plans) {
      if (plan.state === "applied") for (const t of plan.tables) fenced.add(t.table);
    }
    const marked = new Set(headline(state.delay, state.lineage).bottlenecks.map((b) => b.job));
    cy.batch(() => {
      cy.nodes(".table").forEach((node) => {
        const t = tables.get(node.data("name"));
        const lag = tableLag(t);
        const label = `${shortName(node.data("name"))}\n${fmtTableLag(t)}`;
        node.data({ lag, label, ...labelBox(label, false) });
        node.removeClass("lag-ok lag-warn lag-bad lag-none");
        node.addClass(lagClass(lag));
        node.toggleClass("fenced", fenced.has(node.data("name")));
      });
      cy.nodes(".job").forEach((node) => {
        const j = jobs.get(node.data("name"));
        const lag = j ? j.local_lag_ms : null;
        const label = `${node.data("name")}\n${fmtDuration(lag)}`;
        node.data({ lag, label, ...labelBox(label, true) });
        node.toggleClass("bottleneck", marked.has(node.data("name")));
      });
    });
    // Lay out again when the topology changed or a label outgrew its room.
    if (changed || cy.nodes().some((n) => !(n.data("w") <= n.data("laidOutWidth") + GAP_X / 2))) {
      layout(cy);
    }
    document.body.dataset.bottleneck = [...marked].sort().join(" ");
  }

  // What the header names, and the graph marks: the table(s) with the worst lag (every one of
  // them when several share it: a tie is said, never broken silently) and the bottleneck of each
  // (GET /delay's bottleneck_job: among the jobs upstream of the table, the greatest local lag,
  // then the greatest recent hop latency, then the first name; docs/concepts.md#bottleneck). A
  // bottleneck chosen by name among jobs equal on both figures names the jobs it tied with.
  function headline(delay, lineage) {
    const lagged = delay.tables.filter((t) => tableLag(t) !== null && tableLag(t) !== undefined);
    if (!lagged.length) return { lag: null, tables: [], bottlenecks: [] };
    const lag = Math.max(...lagged.map(tableLag));
    const worst = lagged.filter((t) => tableLag(t) === lag).map((t) => t.table).sort();
    const byName = new Map(delay.tables.map((t) => [t.table, t]));
    const jobs = new Map(delay.jobs.map((j) => [j.job, j]));
    const found = new Map();
    for (const table of worst) {
      const job = byName.get(table).bottleneck_job;
      if (!job) continue;
      if (!found.has(job)) found.set(job, { job, tables: [], tiedWith: new Set() });
      const entry = found.get(job);
      entry.tables.push(table);
      const mine = jobs.get(job);
      for (const other of upstreamJobs(table, lineage)) {
        const o = jobs.get(other);
        if (other !== job && mine && o && o.local_lag_ms === mine.local_lag_ms &&
            o.recent_hop_latency_ms === mine.recent_hop_latency_ms) entry.tiedWith.add(other);
      }
    }
    const bottlenecks = [...found.values()].sort((a, b) => a.job.localeCompare(b.job))
      .map((b) => ({ ...b, tiedWith: [...b.tiedWith].sort() }));
    return { lag, tables: worst, bottlenecks };
  }

  // The jobs upstream of a table in the running topology.
  function upstreamJobs(table, lineage) {
    const writers = new Map();
    for (const j of lineage.jobs) for (const k of j.sinks) writers.set(k, j);
    const seen = new Set();
    const stack = [table];
    while (stack.length) {
      const writer = writers.get(stack.pop());
      if (!writer || seen.has(writer.job)) continue;
      seen.add(writer.job);
      stack.push(...writer.sources);
    }
    return seen;
  }

  function headlineText(h) {
    if (!h.tables.length) return "";
    const tie = h.tables.length > 1;
    let text = ` · worst lag ${fmtDuration(h.lag)} ` + (tie
      ? `shared by ${h.tables.length} tables, a tie: ${h.tables.join(", ")}`
      : `(${h.tables[0]})`);
    if (h.bottlenecks.length) {
      const one = h.bottlenecks.length === 1;
      text += ` · ${one ? "bottleneck" : "bottlenecks"} ` + h.bottlenecks.map((b) =>
        b.job + (one && !tie ? "" : ` (of ${b.tables.join(", ")})`) +
        (b.tiedWith.length ? ` — tied with ${b.tiedWith.join(", ")} on local lag and hop ` +
          "latency, first by name" : "")).join("; ");
    }
    return text;
  }

  // -- the lists -------------------------------------------------------------------------------

  function renderLists() {
    const delay = state.delay;
    const top = headline(delay, state.lineage);
    const marked = new Set(top.bottlenecks.map((b) => b.job));
    const tbody = document.querySelector("#tables tbody");
    const rows = [...delay.tables].sort((a, b) => (tableLag(b) ?? -Infinity) -
                                         (tableLag(a) ?? -Infinity) || a.table.localeCompare(b.table));
    tbody.replaceChildren(...rows.map((t) => {
      const clock = t.latest_barrier === null || isWallClock(t.latest_barrier);
      const row = el("tr", { "data-id": "table:" + t.table, "data-table": t.table,
                             "data-lag-class": lagClass(tableLag(t)) },
        el("td", { class: "name" }, wrappable(t.table), ...heldBadges(t.held_back_by, delay.now)),
        el("td", { class: lagClass(tableLag(t)) + (clock ? "" : " not-a-time"),
                   title: clock ? null : `latest barrier ${t.latest_barrier} is not a ` +
                     "wall-clock time (milliseconds since 1970), so it has no lag" },
           fmtTableLag(t)),
        el("td", { class: "time" }, fmtBarrier(t.latest_barrier)),
        el("td", { class: "name" }, wrappable(t.writer_job || "—")),
        el("td", { class: "name" }, wrappable(t.bottleneck_job || "—")),
        el("td", {}, clock ? fmtPercentiles(t.end_to_end_latency_ms) : "—"));
      row.classList.toggle("selected", state.selected === "table:" + t.table);
      return row;
    }));
    const jobRows = [...delay.jobs].sort((a, b) =>
      (b.local_lag_ms ?? -Infinity) - (a.local_lag_ms ?? -Infinity) || a.job.localeCompare(b.job));
    document.querySelector("#jobs tbody").replaceChildren(...jobRows.map((j) => {
      const row = el("tr", { "data-id": "job:" + j.job, "data-job": j.job },
        el("td", { class: "name" }, wrappable(j.job)),
        el("td", {}, fmtDuration(j.local_lag_ms)),
        el("td", {}, fmtDuration(j.recent_hop_latency_ms)),
        el("td", {}, fmtPercentiles(j.hop_latency_ms)));
      row.classList.toggle("bottleneck", marked.has(j.job));
      row.classList.toggle("selected", state.selected === "job:" + j.job);
      return row;
    }));
    document.querySelector("#plans tbody").replaceChildren(...state.plans.map((p) =>
      el("tr", { "data-id": "table:" + p.table },
        el("td", { title: p.id }, p.id.slice(0, 8)),
        el("td", {}, p.table),
        el("td", {}, barrierCell(p.barrier)),
        el("td", {}, p.mode + (p.reason ? " — " + p.reason : "")),
        el("td", {}, p.state))));
    const unplaced = state.unplaced || [];
    const summary = document.getElementById("summary");
    summary.textContent =
      `${delay.tables.length} tables, ${delay.jobs.length} running jobs` +
      (unplaced.length ? ` (${unplaced.length} tables registered only, in no running job and ` +
        "without data: not drawn)" : "") + headlineText(top);
    summary.title = "worst lag: the tables whose newest complete data is oldest (all of them " +
      "on a tie); bottleneck: for each of them, among the jobs upstream, the greatest local " +
      "lag, then the greatest recent hop latency, then the first name (docs/concepts.md#bottleneck)";
    summary.dataset.worst = top.tables.join(" ");
    summary.dataset.tie = String(top.tables.length > 1);
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

  // A name that may wrap after its dots and underscores (and nowhere else) in a narrow column;
  // its text is unchanged.
  function wrappable(name) {
    const span = el("span", {});
    for (const part of String(name).split(/(?<=[._])/)) {
      if (span.childNodes.length) span.appendChild(el("wbr", {}));
      span.appendChild(document.createTextNode(part));
    }
    return span;
  }

  // Text with long tokens (qualified names, reasons) that may wrap anywhere in a narrow panel.
  function breakable(text) {
    return el("span", { class: "breakable" }, text);
  }

  // A snapshot id exactly as the server sent it (a string beyond 2^53), never wrapped.
  function snapshotId(id) {
    return el("code", { class: "id", "data-snapshot-id": String(id) }, String(id));
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
        ["recent barrier", barrierCell(j.recent_barrier)],
        ["recent hop latency", fmtDuration(j.recent_hop_latency_ms)],
        ["hop latency p50/p95/p99", fmtPercentiles(j.hop_latency_ms)],
      ]));
    }
    parts.push(...section("Recent barriers", await optional("progress", async () => {
      const body = await api(`/jobs/${encodeURIComponent(name)}/progress?limit=20`);
      return simpleTable(["barrier", "state", "started", "duration", "hop latency", "attempts"],
        body.progress.map((p) => [barrierCell(p.barrier), p.state, fmtTime(p.started_at),
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
      const clock = detail.latest_barrier === null || isWallClock(detail.latest_barrier);
      parts.push(facts([
        ["lag", fmtTableLag(detail)],
        ["latest barrier", barrierCell(detail.latest_barrier)],
        ["bottleneck", detail.bottleneck ? `${detail.bottleneck.job} (local lag ` +
          `${fmtDuration(detail.bottleneck.local_lag_ms)})` : "—"],
        ["end-to-end p50/p95/p99", clock ? fmtPercentiles(detail.end_to_end_latency_ms) : "—"],
        ["strong cut", detail.held_back_by && detail.held_back_by.length
          ? el("span", { class: "held" }, breakable(fmtHolds(detail.held_back_by, detail.now)))
          : "not held"],
      ]));
      const hops = detail.path.map((h) => [breakable(h.job), breakable(`${h.source} → ${h.sink}`),
                                           fmtDuration(h.lag_ms),
                                           fmtDuration(h.recent_hop_latency_ms)]);
      if (detail.root) hops.push(["(ingestion)", detail.root.table, fmtTableLag(detail.root), "—"]);
      parts.push(...section("Lag, hop by hop", simpleTable(["job", "hop", "adds", "recent hop"], hops)));
    }
    parts.push(...section("Barriers and snapshots", await optional("barriers", async () => {
      const body = await api(`/tables/${path}/barriers?limit=20`);
      return simpleTable(["barrier", "snapshot", "committed", "writer", ""],
        body.barriers.map((b) => [barrierCell(b.barrier), snapshotId(b.snapshot_id),
                                  fmtTime(b.committed_at), b.writer_job || "ingestion",
                                  b.rolled_back ? "rolled back" : ""]));
    })));
    if (state.features.leases) {
      parts.push(...section("Leases", await optional("leases", async () => {
        const body = await api(`/leases?table=${encodeURIComponent(name)}`);
        return simpleTable(["lease", "holder", "expires", "snapshots"],
          body.leases.map((l) => [l.lease_id.slice(0, 8), breakable(l.holder), fmtTime(l.expires_at),
                                  el("span", {}, ...l.snapshots.filter((s) => s.table === name)
                                    .flatMap((s, i) => [i ? ", " : null, snapshotId(s.snapshot_id)]))]));
      })));
    } else {
      parts.push(...section("Leases", el("p", { class: "muted" }, "not offered by this server")));
    }
    if (state.features.protected) {
      parts.push(...section("Protected snapshots", await optional("protections", async () => {
        const body = await api(`/tables/${path}/snapshots/protected`);
        return simpleTable(["snapshot", "barrier", "why"],
          body.snapshots.map((s) => [snapshotId(s.snapshot_id), barrierCell(s.barrier),
                                     breakable(s.reasons.join(", "))]));
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
      setStatus(`updated ${fmtClockUtc(new Date())}`, false);
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

  window.metaservice = { state, refresh, select, lagClass, fmtBarrier, headline, headlineText, parseJson, parseWithSource,
                       parseByScanning, REVIVER_SEES_SOURCE, splitDotted, dotted, tablePath,
                       shortName };

  wire();
  detectFeatures().then(refresh).then(schedule);
})();
