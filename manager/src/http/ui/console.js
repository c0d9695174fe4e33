// Leasehold web console: a read-only view of the manager that served this page.
//
// - One loop follows GET /v1/watch: one blocking request at a time, the next sent no sooner than
//   MIN_WATCH_GAP_MS after a reply (longer for a big state: BUSY_FACTOR times what the last reply
//   took to parse and draw, so following the cluster never takes over the page). On an error it
//   shows the banner, waits a growing delay (BACKOFF_FIRST_MS doubling up to BACKOFF_MAX_MS) and
//   resumes from the revision it last saw.
// - Membership comes from GET /ui/members (every member's own /v1/cluster), refreshed after a
//   watch wake-up at most once per MEMBERS_MIN_GAP_MS, and after MEMBERS_IDLE_MS without one.
// - The feed is derived by diffing successive states (and the leader of successive members).
// - The shard grid is built once per shard count as one HTML string; later states touch only the
//   cells whose owner, epoch or handoff changed, so 65 536 shards stay cheap.
// - Coloured by load (the map's "load" button), the page asks GET /v1/shards?consistent=true and
//   then GET /v1/executors?consistent=true, one request at a time, the next round no sooner than
//   LOAD_GAP_MS after the last (BUSY_FACTOR times the work of a big reply, as for the watch), with
//   a growing delay after an error; switching back to "owner" aborts the request in flight and
//   ends the loop. Only the leader knows loads and a follower's own replies carry none, hence the
//   consistent reads, which a follower forwards to the leader. Cells are touched only where a
//   load, heat step or hot mark changed.
// - Lease bars count down between states from lease_remaining_ms and the local clock.
// - Maintenance mode and shard pins (PROTOCOL P17.4) come with the watched state: a badge in the
//   header while maintenance is on, "pinned to" in a shard's details. The audit log is asked for
//   only on request ("audit log?": GET /v1/audit, which the leader answers and which needs the
//   admin role under TLS) and listed newest first.
// - Namespaces (PROTOCOL P18.1): the page shows one, `default` unless the address names another
//   (`#namespace=NAME`, or `?namespace=NAME`). The header's selector lists them from
//   GET /v1/namespaces, one request at a time, every NAMESPACES_REFRESH_MS and after a namespace
//   was not found. Every namespaced read (the watch, the load rounds, the next plan) names the
//   one shown, `default` by naming none, as before namespaces. Choosing another aborts the watch
//   in flight (and the load round), forgets what was drawn and follows the new one from revision
//   0, with its own shard count; the choice is kept in the address. A namespace the watch finds
//   missing (404) falls back to `default` once, with a notice, not a retry loop.
'use strict';

(() => {
  const WATCH_WAIT = '30s';
  /** A watch reply is due within WATCH_WAIT; a connection that hangs longer is cut. */
  const WATCH_ABORT_MS = 45000;
  const MEMBERS_ABORT_MS = 5000;
  /** A safe-to-stop or next-plan question (the leader probes the voters for up to a second). */
  const STOP_CHECK_ABORT_MS = 5000;
  /** The audit log: at most 1024 records from the leader. */
  const AUDIT_ABORT_MS = 10000;
  const MIN_WATCH_GAP_MS = 250;
  const MAX_WATCH_GAP_MS = 2000;
  const BUSY_FACTOR = 4;
  const BACKOFF_FIRST_MS = 250;
  const BACKOFF_MAX_MS = 5000;
  const MEMBERS_MIN_GAP_MS = 1000;
  const MEMBERS_IDLE_MS = 5000;
  const FEED_MAX = 200;
  /** Shards named in one feed line; the rest are counted. */
  const FEED_SAMPLE = 8;
  /** Names of departed executors remembered for the feed, beyond twice the registered ones. */
  const NAMES_KEPT = 256;
  /** Owner colours (console.css .o0 … .o11). */
  const PALETTE = 12;
  /** Lease bars redraw at most this often. */
  const BAR_FRAME_MS = 100;
  /**
   * Load colouring: the shortest gap between two rounds of load requests. The leader takes in
   * reported loads once a step (a third of the lease, seconds), so asking more often shows
   * nothing new.
   */
  const LOAD_GAP_MS = 2000;
  const LOAD_MAX_GAP_MS = 10000;
  const LOAD_ABORT_MS = 10000;
  const LOAD_BACKOFF_FIRST_MS = 1000;
  const LOAD_BACKOFF_MAX_MS = 15000;
  /**
   * The heat scale (console.css .heat-1 … .heat-9; .heat-0 is a load of 0): logarithmic, relative
   * to the busiest shard, HEAT_STEPS steps over HEAT_DECADES decades, so a third of a decade
   * (a factor of about 2.15) a step and anything below a thousandth of the busiest in the first.
   * Shard loads are typically skewed (Zipf-like: the k-th busiest carries about 1/k of the
   * busiest); on a linear scale everything but the few busiest shards would look idle, while a
   * log scale gives each factor of load the same visual step. A rank scale would spread even a
   * perfectly uniform fleet over every colour; relative to the busiest, it stays one colour.
   */
  const HEAT_STEPS = 9;
  const HEAT_DECADES = 3;
  /** The namespace of everything that names none (PROTOCOL P18.1); it always exists. */
  const DEFAULT_NAMESPACE = 'default';
  /** A namespace name as the manager checks it (api/src/wire/namespaces.rs): a DNS label. */
  const NAMESPACE_NAME = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
  /** The selector's list is asked for again after this long (or at once after a 404). */
  const NAMESPACES_REFRESH_MS = 10000;
  const NAMESPACES_MIN_GAP_MS = 1000;
  const NAMESPACES_ABORT_MS = 5000;

  const $ = (id) => document.getElementById(id);
  const ui = {
    namespace: $('namespace'),
    namespaceNote: $('namespace-note'),
    grid: $('grid'),
    colourOwner: $('colour-owner'),
    colourLoad: $('colour-load'),
    loadLegend: $('load-legend'),
    loadNote: $('load-note'),
    detail: $('shard-detail'),
    members: $('members').tBodies[0],
    membersNote: $('members-note'),
    executors: $('executors').tBodies[0],
    changes: $('changes'),
    legend: $('legend'),
    shardStats: $('shard-stats'),
    banner: $('banner'),
    bannerText: $('banner-text'),
    link: $('link'),
    linkText: $('link-text'),
    leader: $('leader'),
    term: $('term'),
    revision: $('revision'),
    executorCount: $('executor-count'),
    shardCount: $('shard-count'),
    lease: $('lease'),
    servedBy: $('served-by'),
    stopCheck: $('stop-check'),
    stopCheckSubject: $('stop-check-subject'),
    stopCheckVerdict: $('stop-check-verdict'),
    planAsk: $('plan-ask'),
    planSummary: $('plan-summary'),
    maintenance: $('maintenance'),
    auditAsk: $('audit-ask'),
    auditSummary: $('audit-summary'),
    auditRecords: $('audit-records'),
    audit: $('audit').tBodies[0],
  };
  /** The detail line's text before a shard is pointed at. */
  const DETAIL_HINT = ui.detail.textContent;

  /** What the page shows now. */
  const shown = {
    view: null, // the last StateView
    viewAt: 0, // performance.now() when it arrived: lease clocks count down from here
    count: -1, // shard count the grid was built for
    cells: [],
    owners: [], // per shard: owner id, '' when unowned
    epochs: [],
    handoffs: [], // per shard: handoff target id, '' when none
    pins: [], // per shard: the executor it is pinned to (P17.4), '' when none
    secondaries: [], // per shard: its secondaries as the detail line says them (§19), '' when none
    maintenance: null, // maintenance mode (P17.4) as last shown; null before the first state
    executors: new Map(), // id → ExecutorView
    names: new Map(), // id → label, kept after it left, for the feed
    colours: new Map(), // id → palette slot
    bars: [], // lease bars of the executor rows
    leaderId: undefined, // undefined before the first members reply
    focus: 0, // the grid cell that takes the keyboard focus (roving tabindex)
    pointed: -1, // the cell the detail line describes
    mode: 'owner', // what colours the map: 'owner' or 'load'
    classes: [], // per shard: the class its cell has now, so unchanged cells are not touched
    loads: [], // per shard, coloured by load: the leader's load, null when unknown
    hot: [], // per shard, coloured by load: marked hot by the leader (P15.4)
    polled: new Map(), // id → ExecutorView of the last /v1/executors?consistent=true, by load only
    utilisationCells: new Map(), // id → its row's utilisation cell
  };

  /** Read by tests and scripts. */
  const stats = {
    watchRequests: 0,
    membersRequests: 0,
    revision: null,
    renderMs: null, // first state: parse + build the page
    firstFrameMs: null, // first state: parse to the first frame painted
    loadRequests: 0, // rounds of load requests started (each asks for the shards, then executors)
    loadRounds: 0, // rounds whose both answers were applied
    namespace: DEFAULT_NAMESPACE, // the namespace shown (P18.1)
    namespacesRequests: 0, // GET /v1/namespaces sent
  };
  window.__console = stats;

  // ---- helpers -------------------------------------------------------------------------------

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  function escapeAttr(text) {
    return String(text).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);
  }

  function node(tag, className, text) {
    const element = document.createElement(tag);
    if (className) element.className = className;
    if (text !== undefined && text !== null) element.textContent = String(text);
    return element;
  }

  function label(id) {
    return shown.names.get(id) || id;
  }

  function labelWithId(id) {
    const name = label(id);
    return name === id ? id : name + ' (' + id + ')';
  }

  function seconds(ms) {
    return (ms / 1000).toFixed(ms < 10000 ? 1 : 0) + ' s';
  }

  function opt(value) {
    return value === null || value === undefined ? '—' : String(value);
  }

  /** An executor's labels (P18.3) as leaseholdctl prints them: zone first, then key=value. */
  function labelText(labels) {
    const pairs = Object.entries(labels || {});
    if (!pairs.length) return '–';
    pairs.sort(([a], [b]) => (a === 'zone' ? -1 : b === 'zone' ? 1 : a < b ? -1 : a > b ? 1 : 0));
    return pairs.map(([key, value]) => key + '=' + value).join(', ');
  }

  /**
   * A load or utilisation for people: three significant figures (0.00312, 41.7, 1250), as
   * leaseholdctl prints them (api/src/ctl/table.rs human_load), or '—' when unknown.
   */
  function formatLoad(value) {
    if (typeof value !== 'number') return '—';
    if (value === 0) return '0';
    const digits = 2 - Math.max(-9, Math.min(2, Math.floor(Math.log10(Math.abs(value)))));
    return value.toFixed(digits);
  }

  /**
   * GET `url` within `timeoutMs` (headers and body) and return its text, for the caller to parse
   * (and time); an error answer's problem detail goes into the error.
   */
  async function fetchText(url, timeoutMs, cancel) {
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), timeoutMs);
    // The caller's own cancellation (load colouring switched off) ends the request too.
    const onCancel = () => abort.abort();
    if (cancel) cancel.addEventListener('abort', onCancel);
    try {
      const reply = await fetch(url, { cache: 'no-store', signal: abort.signal, headers: { accept: 'application/json' } });
      const text = await reply.text();
      if (!reply.ok) {
        let detail = '';
        try {
          detail = JSON.parse(text).detail || '';
        } catch (_) {
          // not a problem document
        }
        const failure = new Error('HTTP ' + reply.status + (detail ? ': ' + detail : ''));
        failure.status = reply.status;
        throw failure;
      }
      return { text, receivedAt: performance.now() };
    } catch (error) {
      if (error.name === 'AbortError') {
        throw new Error(cancel && cancel.aborted ? 'cancelled' : 'no answer within ' + seconds(timeoutMs));
      }
      throw error;
    } finally {
      clearTimeout(timer);
      if (cancel) cancel.removeEventListener('abort', onCancel);
    }
  }

  // ---- colours -------------------------------------------------------------------------------

  const utf8 = new TextEncoder();

  /**
   * An executor's palette slot: FNV-1a (32-bit) of its id's UTF-8 bytes, mod PALETTE. It depends
   * on the id alone, not on the order the page met executors in, so an executor keeps its colour
   * across reloads, browsers and comings and goings of others (two may share one: the legend
   * and the table name them). Remembered while it is registered or owns a shard, so 65 536
   * cells hash a handful of ids.
   */
  function colourOf(id) {
    let slot = shown.colours.get(id);
    if (slot === undefined) {
      let hash = 0x811c9dc5;
      for (const byte of utf8.encode(id)) hash = Math.imul(hash ^ byte, 0x01000193) >>> 0;
      slot = hash % PALETTE;
      shown.colours.set(id, slot);
    }
    return slot;
  }

  function cellClass(owner, handoff) {
    if (!owner) return 'u';
    return 'o' + colourOf(owner) + (handoff !== '' ? ' h' : '');
  }

  /** The heat step of `load`: 0 for no load, else 1 … HEAT_STEPS on the log scale above. */
  function heatStep(load, busiest) {
    if (!(load > 0) || !(busiest > 0)) return 0;
    const decadesBelow = Math.log10(busiest / load);
    return Math.max(1, HEAT_STEPS - Math.floor((decadesBelow * HEAT_STEPS) / HEAT_DECADES));
  }

  /** Shard i's class coloured by load: its heat step and hot mark, or 'nl' when unknown. */
  function loadClass(i, busiest) {
    const load = shown.loads[i];
    if (load === null || load === undefined) return 'nl';
    return 'heat-' + heatStep(load, busiest) + (shown.hot[i] ? ' hot' : '');
  }

  /** Sets shard i's class, touching the cell only when it changes. */
  function setClass(i, className) {
    if (shown.classes[i] === className) return;
    shown.classes[i] = className;
    shown.cells[i].className = className;
  }

  // ---- shard grid ----------------------------------------------------------------------------

  function density(count) {
    if (count <= 256) return 'xl';
    if (count <= 1024) return 'l';
    if (count <= 4096) return 'm';
    if (count <= 16384) return 's';
    return 'xs';
  }

  /** Builds every cell in one string: the only time the grid is rebuilt. */
  function buildGrid(shards, count) {
    const owners = new Array(count).fill('');
    const epochs = new Array(count).fill(0);
    const handoffs = new Array(count).fill('');
    const pins = new Array(count).fill('');
    const secondaries = new Array(count).fill('');
    for (const s of shards) {
      if (s.shard >= count) continue;
      owners[s.shard] = s.owner || '';
      epochs[s.shard] = s.epoch;
      handoffs[s.shard] = s.handoff ? s.handoff.to || '?' : '';
      pins[s.shard] = s.pinned_to || '';
      secondaries[s.shard] = secondariesOf(s);
    }
    // A new shard count: no load is known for the new map until the next answer.
    shown.loads = new Array(count).fill(null);
    shown.hot = new Array(count).fill(false);
    const classes = new Array(count);
    const html = new Array(count);
    for (let i = 0; i < count; i++) {
      classes[i] = shown.mode === 'load' ? 'nl' : cellClass(owners[i], handoffs[i]);
      const pinned = pins[i] === '' ? '' : '" data-pinned="' + escapeAttr(pins[i]);
      html[i] = '<i data-shard="' + i + '" data-owner="' + escapeAttr(owners[i]) + pinned + '" class="' + classes[i] + '"></i>';
    }
    shown.classes = classes;
    ui.grid.dataset.density = density(count);
    ui.grid.innerHTML = html.join('');
    shown.cells = Array.from(ui.grid.children);
    shown.owners = owners;
    shown.epochs = epochs;
    shown.handoffs = handoffs;
    shown.pins = pins;
    shown.secondaries = secondaries;
    shown.count = count;
    shown.focus = 0;
    shown.pointed = -1;
    if (count > 0) shown.cells[0].tabIndex = 0;
  }

  /**
   * A shard's secondaries (PROTOCOL §19) as the detail line says them: each executor, and
   * whether it is ready or lost; '' for a shard without any.
   */
  function secondariesOf(s) {
    if (!s.secondaries || s.secondaries.length === 0) return '';
    return s.secondaries.map((secondary) => {
      const state = secondary.lost_for_ms !== undefined ? ' lost' : secondary.ready ? ' ready' : ' warming';
      return labelWithId(secondary.executor_id) + state;
    }).join(', ');
  }

  /**
   * Applies a new shard list to the grid, touching only changed cells. Returns the changes
   * grouped for the feed: key "kind|from|to" → shards.
   */
  function updateGrid(shards) {
    const groups = new Map();
    const note = (kind, from, to, shard) => {
      const key = kind + '|' + from + '|' + to;
      const list = groups.get(key);
      if (list) list.push(shard);
      else groups.set(key, [shard]);
    };
    for (const s of shards) {
      const i = s.shard;
      if (i >= shown.count) continue;
      const owner = s.owner || '';
      const handoff = s.handoff ? s.handoff.to || '?' : '';
      const wasOwner = shown.owners[i];
      const wasHandoff = shown.handoffs[i];
      const pin = s.pinned_to || '';
      const wasPin = shown.pins[i];
      const secondaries = secondariesOf(s);
      if (secondaries !== shown.secondaries[i]) {
        shown.secondaries[i] = secondaries;
        if (i === shown.pointed) describe(i);
      }
      if (pin !== wasPin) {
        if (wasPin !== '') note('unpin', wasPin, '', i);
        if (pin !== '') note('pin', '', pin, i);
        const cell = shown.cells[i];
        if (pin === '') delete cell.dataset.pinned;
        else cell.dataset.pinned = pin;
        shown.pins[i] = pin;
        if (i === shown.pointed) describe(i);
      }
      if (owner === wasOwner && handoff === wasHandoff && s.epoch === shown.epochs[i]) continue;
      if (wasHandoff === '' && handoff !== '') note('handoff', owner, handoff, i);
      else if (wasHandoff !== '' && handoff === '') {
        if (owner !== wasOwner && owner !== '') note('done', wasOwner, owner, i);
        else if (owner === '') note('unown', wasOwner, '', i);
        else note('cancel', owner, '', i);
      } else if (owner !== wasOwner) {
        if (wasOwner === '') note('assign', '', owner, i);
        else if (owner === '') note('unown', wasOwner, '', i);
        else note('move', wasOwner, owner, i);
      }
      const cell = shown.cells[i];
      if (owner !== wasOwner) cell.dataset.owner = owner;
      shown.owners[i] = owner;
      shown.epochs[i] = s.epoch;
      shown.handoffs[i] = handoff;
      // Coloured by load, a new owner changes nothing until the leader's loads say so.
      if (shown.mode === 'owner') setClass(i, cellClass(owner, handoff));
      if (i === shown.pointed) describe(i);
    }
    return groups;
  }

  function describe(i) {
    shown.pointed = i;
    const owner = shown.owners[i];
    const handoff = shown.handoffs[i];
    let text = 'shard ' + i + ' · epoch ' + shown.epochs[i] + ' · ';
    text += owner ? 'owner ' + labelWithId(owner) : 'unowned: no executor may serve it';
    if (handoff) text += ' · handing off to ' + (handoff === '?' ? 'the pool' : labelWithId(handoff));
    if (shown.pins[i]) text += ' · pinned to ' + labelWithId(shown.pins[i]);
    if (shown.secondaries[i]) text += ' · secondaries ' + shown.secondaries[i];
    if (shown.mode === 'load') {
      const load = shown.loads[i];
      text += load === null || load === undefined ? ' · load unknown' : ' · load ' + formatLoad(load);
      if (shown.hot[i]) text += ' · hot';
    }
    const cell = shown.cells[i];
    if (cell) cell.title = text;
    ui.detail.textContent = text;
  }

  function cellIndex(target) {
    if (!target || target.parentNode !== ui.grid) return -1;
    const index = Number(target.dataset.shard);
    return Number.isInteger(index) ? index : -1;
  }

  /** Cells per row, read from the layout (the grid wraps). */
  function rowLength() {
    const cells = shown.cells;
    if (cells.length < 2) return 1;
    const top = cells[0].offsetTop;
    let n = 1;
    while (n < cells.length && cells[n].offsetTop === top) n++;
    return n;
  }

  function moveFocus(to) {
    const cells = shown.cells;
    if (!cells.length) return;
    const index = Math.max(0, Math.min(cells.length - 1, to));
    if (cells[shown.focus]) cells[shown.focus].removeAttribute('tabindex');
    shown.focus = index;
    cells[index].tabIndex = 0;
    cells[index].focus();
  }

  ui.grid.addEventListener('mouseover', (event) => {
    const i = cellIndex(event.target);
    if (i >= 0) describe(i);
  });
  ui.grid.addEventListener('focusin', (event) => {
    const i = cellIndex(event.target);
    if (i >= 0) describe(i);
  });
  ui.grid.addEventListener('click', (event) => {
    const i = cellIndex(event.target);
    if (i >= 0) moveFocus(i);
  });
  ui.grid.addEventListener('keydown', (event) => {
    const i = cellIndex(event.target);
    if (i < 0) return;
    const rows = { ArrowUp: -1, ArrowDown: 1, PageUp: -8, PageDown: 8 }[event.key];
    const step = rows !== undefined ? rows * rowLength() : { ArrowLeft: -1, ArrowRight: 1, Home: -i, End: shown.cells.length }[event.key];
    if (step === undefined) return;
    event.preventDefault();
    moveFocus(i + step);
  });

  // ---- executors, legend, summary ------------------------------------------------------------

  function renderExecutors(view, owned) {
    const list = [...view.executors].sort((a, b) => a.registered_revision - b.registered_revision);
    const rows = document.createDocumentFragment();
    shown.bars = [];
    shown.utilisationCells = new Map();
    for (const e of list) {
      const tr = node('tr');
      tr.dataset.executor = e.executor_id;
      tr.dataset.name = e.name || '';
      if (e.draining) tr.className = 'draining';
      const name = node('td', 'name');
      const who = node('span', 'who');
      who.append(node('span', 'sw o' + colourOf(e.executor_id)), node('span', null, e.name || e.executor_id));
      name.append(who);
      // Its labels (P18.3) under its name, zone first: a line of their own rather than a column,
      // so the table stays as wide as the page.
      if (e.labels && Object.keys(e.labels).length) {
        name.append(node('small', 'labels muted', ' ' + labelText(e.labels)));
      }
      const lease = node('td', 'lease-col');
      const bar = node('span', 'bar');
      const fill = node('span', 'fill');
      bar.append(fill);
      const left = node('span', 'remaining');
      lease.append(bar, left);
      shown.bars.push({ bar, fill, left, remaining: e.lease_remaining_ms });
      const delivered = e.shards.length;
      const releasing = (owned.get(e.executor_id) || 0) - delivered;
      const shards = node('td', 'num', delivered);
      if (releasing > 0) shards.append(node('small', 'releasing', ' +' + releasing + ' releasing'));
      const draining = node('td');
      draining.append(e.draining ? node('span', 'badge warn', 'draining') : node('span', 'muted', 'no'));
      const capacity = node('td', 'num capacity wide', e.capacity === undefined ? 1 : e.capacity);
      const version = node('td', 'mono wide app-version', e.app_version || '–');
      const utilisation = node('td', 'num utilisation');
      shown.utilisationCells.set(e.executor_id, utilisation);
      showUtilisation(utilisation, utilisationSource(e));
      tr.append(name, node('td', 'mono wide', e.executor_id), node('td', 'mono wide', e.address), lease, shards, capacity, version, utilisation, draining);
      rows.append(tr);
    }
    if (!list.length) {
      const tr = node('tr', 'empty');
      const td = node('td', null, 'no executors registered');
      td.colSpan = 9;
      tr.append(td);
      rows.append(tr);
    }
    ui.executors.replaceChildren(rows);
    drawBars(performance.now());
  }

  /**
   * Where an executor's utilisation comes from: coloured by load, the last consistent read (so
   * the table and the map show the same moment); otherwise the watched state, which has it only
   * when the leader answered (a follower's own state has no loads).
   */
  function utilisationSource(e) {
    if (shown.mode === 'load') {
      const polled = shown.polled.get(e.executor_id);
      if (polled) return polled;
    }
    return e;
  }

  function showUtilisation(cell, e) {
    cell.textContent = formatLoad(e.utilisation);
    if (typeof e.utilisation === 'number') {
      cell.dataset.utilisation = String(e.utilisation);
      cell.title = 'load ' + formatLoad(e.load) + ' ÷ capacity ' + (e.capacity === undefined ? 1 : e.capacity);
    } else {
      delete cell.dataset.utilisation;
      cell.title = 'unknown: only the leader knows loads';
    }
  }

  /** Redraws the utilisation column in place (after a load round, or a change of colouring). */
  function refreshUtilisation() {
    for (const [id, cell] of shown.utilisationCells) {
      const e = shown.executors.get(id);
      if (e) showUtilisation(cell, utilisationSource(e));
    }
  }

  function renderLegend(view, owned, handoffs, unowned) {
    const items = document.createDocumentFragment();
    const ids = [...owned.keys()].sort((a, b) => label(a).localeCompare(label(b)));
    for (const id of ids) {
      const li = node('li');
      li.append(node('span', 'sw o' + colourOf(id)), node('span', null, label(id) + ' · ' + owned.get(id)));
      items.append(li);
    }
    const handoff = node('li');
    handoff.append(node('span', 'sw o0 h'), node('span', null, 'handoff in flight · ' + handoffs));
    const none = node('li');
    none.append(node('span', 'sw u'), node('span', null, 'unowned · ' + unowned));
    items.append(handoff, none);
    ui.legend.replaceChildren(items);
    const count = view.shard_count;
    ui.shardStats.textContent = count + ' shards · ' + (count - unowned) + ' owned · ' + handoffs + ' in handoff · ' + unowned + ' unowned';
  }

  /** The header's badge while maintenance mode is on (P17.4); the feed notes each change. */
  function renderMaintenance(on, first) {
    if (on === shown.maintenance) return;
    if (!first) {
      feed('maintenance', on
        ? 'maintenance mode on: placement frozen (no balancing, no shards for joiners, drains wait)'
        : 'maintenance mode off: placement resumes');
    }
    shown.maintenance = on;
    ui.maintenance.dataset.on = String(on);
    ui.maintenance.textContent = on ? 'maintenance: placement frozen' : '';
    ui.maintenance.title = on
      ? 'Maintenance mode is on: no balancing, no shards for joiners, drains wait; shards nobody holds are still placed.'
      : '';
  }

  function renderSummary(view) {
    ui.revision.textContent = view.revision;
    ui.executorCount.textContent = view.executors.length;
    ui.shardCount.textContent = view.shard_count;
    ui.lease.textContent = view.lease_duration_ms ? seconds(view.lease_duration_ms) : '—';
  }

  let lastBarFrame = 0;
  function drawBars(now) {
    lastBarFrame = now;
    const total = (shown.view && shown.view.lease_duration_ms) || 1;
    const elapsed = now - shown.viewAt;
    for (const b of shown.bars) {
      const left = Math.max(0, b.remaining - elapsed);
      const fraction = Math.min(1, left / total);
      b.fill.style.width = (fraction * 100).toFixed(1) + '%';
      b.bar.className = 'bar' + (left === 0 ? ' lapsed' : fraction < 0.34 ? ' low' : fraction < 0.67 ? ' mid' : '');
      b.left.textContent = left === 0 ? 'lapsed' : seconds(left);
    }
  }
  function animateBars(now) {
    if (now - lastBarFrame >= BAR_FRAME_MS) drawBars(now);
    requestAnimationFrame(animateBars);
  }
  requestAnimationFrame(animateBars);

  // ---- feed ----------------------------------------------------------------------------------

  /** The feed's short tag per kind of change (the kind is also its CSS class). */
  const TAGS = { online: 'link', offline: 'link', joined: 'join', left: 'left', move: 'move', handoff: 'handoff', unowned: 'unowned', leader: 'leader', drain: 'drain', config: 'config', pin: 'pin', maintenance: 'maint', namespace: 'ns' };

  function feed(kind, text) {
    const placeholder = ui.changes.querySelector('.empty');
    if (placeholder) placeholder.remove();
    const li = node('li');
    li.dataset.kind = kind;
    const time = node('time', null, new Date().toLocaleTimeString([], { hour12: false }));
    li.append(time, node('span', 'tag ' + kind, TAGS[kind] || kind), node('span', 'text', text));
    ui.changes.prepend(li);
    while (ui.changes.children.length > FEED_MAX) ui.changes.lastElementChild.remove();
  }

  function shardList(shards) {
    const named = shards.slice(0, FEED_SAMPLE).join(', ');
    return shards.length > FEED_SAMPLE ? named + ' … (+' + (shards.length - FEED_SAMPLE) + ')' : named;
  }

  function plural(n, word) {
    return n + ' ' + word + (n === 1 ? '' : 's');
  }

  function feedShardChanges(groups) {
    for (const [key, shards] of groups) {
      const [kind, from, to] = key.split('|');
      const n = plural(shards.length, 'shard');
      const which = ' [' + shardList(shards) + ']';
      switch (kind) {
        case 'handoff':
          feed('handoff', 'handoff started: ' + n + ' ' + label(from) + ' → ' + (to === '?' ? 'pool' : label(to)) + which);
          break;
        case 'done':
          feed('handoff', 'handoff completed: ' + n + ' now on ' + label(to) + which);
          break;
        case 'cancel':
          feed('handoff', 'handoff cancelled: ' + n + ' stay on ' + label(from) + which);
          break;
        case 'assign':
          feed('move', n + ' assigned to ' + label(to) + which);
          break;
        case 'unown':
          feed('unowned', n + ' unowned (were ' + label(from) + "'s)" + which);
          break;
        case 'pin':
          feed('pin', n + ' pinned to ' + label(to) + which);
          break;
        case 'unpin':
          feed('pin', n + ' no longer pinned to ' + label(from) + which);
          break;
        default:
          feed('move', n + ' moved ' + label(from) + ' → ' + label(to) + which);
      }
    }
  }

  function feedExecutorChanges(previous, current, departed) {
    const reasons = new Map(departed.map((d) => [d.executor_id, d.reason]));
    for (const [id, e] of current) {
      const before = previous.get(id);
      if (!before) feed('joined', labelWithId(id) + ' joined from ' + e.address);
      else if (before.draining !== e.draining) feed('drain', label(id) + (e.draining ? ' is draining' : ' is no longer draining'));
    }
    for (const id of previous.keys()) {
      if (current.has(id)) continue;
      const reason = reasons.get(id);
      if (reason === 'reaped') feed('left', labelWithId(id) + ' reaped: its lease lapsed');
      else if (reason === 'deregistered') feed('left', labelWithId(id) + ' deregistered');
      else feed('left', labelWithId(id) + ' left');
    }
  }

  // ---- one state -----------------------------------------------------------------------------

  function applyState(reply, receivedAt) {
    const view = reply.state;
    const first = shown.view === null;
    const executors = new Map(view.executors.map((e) => [e.executor_id, e]));
    for (const e of view.executors) shown.names.set(e.executor_id, e.name || e.executor_id);
    if (!first) feedExecutorChanges(shown.executors, executors, reply.departed || []);
    let groups = new Map();
    if (view.shard_count !== shown.count) {
      if (!first) feed('config', 'shard count ' + view.shard_count + ': the map is redrawn');
      buildGrid(view.shards, view.shard_count);
    } else {
      groups = updateGrid(view.shards);
    }
    feedShardChanges(groups);
    shown.view = view;
    shown.viewAt = receivedAt;
    shown.executors = executors;

    const owned = new Map();
    let handoffs = 0;
    let unowned = 0;
    for (let i = 0; i < shown.count; i++) {
      const owner = shown.owners[i];
      if (owner === '') unowned++;
      else owned.set(owner, (owned.get(owner) || 0) + 1);
      if (shown.handoffs[i] !== '') handoffs++;
    }
    for (const id of [...shown.colours.keys()]) {
      if (!executors.has(id) && !owned.has(id)) shown.colours.delete(id);
    }
    // Names of executors that left are kept for the feed, but not without bound.
    if (shown.names.size > 2 * executors.size + NAMES_KEPT) {
      for (const id of [...shown.names.keys()]) if (!executors.has(id)) shown.names.delete(id);
    }
    renderExecutors(view, owned);
    renderLegend(view, owned, handoffs, unowned);
    renderSummary(view);
    renderMaintenance(view.maintenance === true, first);
    stats.revision = view.revision;
    if (first) {
      const which = space.name === DEFAULT_NAMESPACE ? '' : 'namespace ' + space.name + ' at ';
      feed('online', 'watching ' + which + 'revision ' + view.revision + ': ' + plural(view.executors.length, 'executor') + ', ' + plural(view.shard_count, 'shard'));
    }
  }

  // ---- load colouring -----------------------------------------------------------------------

  /**
   * Colours the map by the loads in a /v1/shards reply, touching only the cells whose load, hot
   * mark or heat step changed. Returns what the legend and the note need.
   */
  function applyLoads(shards) {
    // No map yet (a namespace just chosen, its first state not in): nothing to colour.
    const count = Math.max(0, shown.count);
    const loads = new Array(count).fill(null);
    const hot = new Array(count).fill(false);
    let known = 0;
    let busiest = 0;
    let hotCount = 0;
    for (const s of shards) {
      const i = s.shard;
      if (!(i >= 0 && i < count)) continue;
      if (typeof s.load === 'number') {
        loads[i] = s.load;
        known++;
        if (s.load > busiest) busiest = s.load;
      }
      if (s.hot === true) {
        hot[i] = true;
        hotCount++;
      }
    }
    for (let i = 0; i < count; i++) {
      const cell = shown.cells[i];
      if (loads[i] !== shown.loads[i]) {
        shown.loads[i] = loads[i];
        if (loads[i] === null) delete cell.dataset.load;
        else cell.dataset.load = String(loads[i]);
      }
      if (hot[i] !== shown.hot[i]) {
        shown.hot[i] = hot[i];
        if (hot[i]) cell.dataset.hot = 'true';
        else delete cell.dataset.hot;
      }
      setClass(i, loadClass(i, busiest));
      if (i === shown.pointed) describe(i);
    }
    return { known, busiest, hotCount };
  }

  /** No load is known (an error, a leader that has none yet): the map says so, uncoloured. */
  function forgetLoads(why) {
    for (let i = 0; i < shown.count; i++) {
      const cell = shown.cells[i];
      if (shown.loads[i] !== null) {
        shown.loads[i] = null;
        delete cell.dataset.load;
      }
      if (shown.hot[i]) {
        shown.hot[i] = false;
        delete cell.dataset.hot;
      }
      setClass(i, 'nl');
    }
    if (shown.pointed >= 0) describe(shown.pointed);
    sayAboutLoads(why);
  }

  /** The panel's line about loads: why none are shown, or that they are all 0; hidden otherwise. */
  function sayAboutLoads(text) {
    ui.loadNote.textContent = text || '';
    ui.loadNote.hidden = !text;
  }

  function renderLoadLegend(summary) {
    const items = document.createDocumentFragment();
    const idle = node('li');
    idle.append(node('span', 'sw heat-0'), node('span', null, 'idle (0)'));
    const scale = node('li', 'scale-item');
    const steps = node('span', 'scale');
    steps.setAttribute('aria-hidden', 'true');
    for (let step = 1; step <= HEAT_STEPS; step++) steps.append(node('span', 'sw heat-' + step));
    scale.append(
      node('span', null, '≤ 1/1000'),
      steps,
      node('span', null, 'busiest · ' + formatLoad(summary.busiest)),
      node('span', 'muted', '(log scale: a step is ×2.15 of load)'),
    );
    const hot = node('li');
    hot.append(node('span', 'sw heat-' + HEAT_STEPS + ' hot'), node('span', null, 'hot · ' + summary.hotCount));
    const unknown = node('li');
    unknown.append(node('span', 'sw nl'), node('span', null, 'no load known'));
    items.append(idle, scale, hot, unknown);
    ui.loadLegend.replaceChildren(items);
  }

  const loadPoll = { generation: 0, cancel: null, wake: null };

  /** Waits `ms`, or less if the colouring is switched meanwhile (loadPoll.wake ends the wait). */
  function pause(ms) {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        loadPoll.wake = null;
        resolve();
      };
      const timer = setTimeout(done, ms);
      loadPoll.wake = done;
    });
  }

  /** One round at a time while this generation of load colouring lasts. */
  async function pollLoads(generation, cancel) {
    const current = () => generation === loadPoll.generation;
    let backoff = LOAD_BACKOFF_FIRST_MS;
    while (current()) {
      if (shown.count < 0) {
        // A namespace just chosen, its map not drawn yet: nothing to colour, nothing asked.
        await pause(MIN_WATCH_GAP_MS);
        continue;
      }
      try {
        stats.loadRequests++;
        const shardsReply = await fetchText(inSpace('../v1/shards?consistent=true'), LOAD_ABORT_MS, cancel);
        if (!current()) return;
        let started = performance.now();
        const summary = applyLoads(JSON.parse(shardsReply.text));
        let busyMs = performance.now() - started;
        if (summary.known === 0) {
          // A leader that has not published loads (of this namespace) yet: nothing to colour by.
          forgetLoads(space.name === DEFAULT_NAMESPACE
            ? 'No load known: the leader has none yet (no executor has reported since it was elected).'
            : 'No load known: the leader has none for namespace ' + space.name + ' (none of its executors has reported one since it was elected).');
        } else {
          renderLoadLegend(summary);
          sayAboutLoads(summary.busiest === 0 ? 'Every shard’s load is 0: no executor reports any work.' : '');
        }
        const executorsReply = await fetchText(inSpace('../v1/executors?consistent=true'), LOAD_ABORT_MS, cancel);
        if (!current()) return;
        started = performance.now();
        shown.polled = new Map(JSON.parse(executorsReply.text).map((e) => [e.executor_id, e]));
        refreshUtilisation();
        busyMs += performance.now() - started;
        stats.loadRounds++;
        backoff = LOAD_BACKOFF_FIRST_MS;
        await pause(Math.min(LOAD_MAX_GAP_MS, Math.max(LOAD_GAP_MS, BUSY_FACTOR * busyMs)));
      } catch (error) {
        if (!current()) return;
        shown.polled = new Map();
        refreshUtilisation();
        forgetLoads('No load known: ' + error.message + ' (only the leader knows loads); next try in ' + seconds(backoff) + '.');
        await pause(backoff);
        backoff = Math.min(backoff * 2, LOAD_BACKOFF_MAX_MS);
      }
    }
  }

  /** Switches the map's colouring; 'owner' leaves the page exactly as without load colouring. */
  function colourBy(mode) {
    if (mode === shown.mode) return;
    shown.mode = mode;
    ui.colourOwner.setAttribute('aria-pressed', String(mode === 'owner'));
    ui.colourLoad.setAttribute('aria-pressed', String(mode === 'load'));
    ui.legend.hidden = mode === 'load';
    ui.loadLegend.hidden = mode === 'owner';
    restartLoads();
    if (mode === 'owner') {
      for (let i = 0; i < shown.count; i++) {
        const cell = shown.cells[i];
        if (shown.loads[i] !== null) delete cell.dataset.load;
        if (shown.hot[i]) delete cell.dataset.hot;
        shown.loads[i] = null;
        shown.hot[i] = false;
        setClass(i, cellClass(shown.owners[i], shown.handoffs[i]));
      }
      shown.polled = new Map();
      refreshUtilisation();
      sayAboutLoads('');
      if (shown.pointed >= 0) describe(shown.pointed);
    }
  }

  /**
   * Ends the running load loop, if any (its request is aborted and its wait cut short), and,
   * coloured by load, starts another from nothing known: after a change of colouring or of
   * namespace.
   */
  function restartLoads() {
    loadPoll.generation++;
    if (loadPoll.cancel) loadPoll.cancel.abort();
    loadPoll.cancel = null;
    if (loadPoll.wake) loadPoll.wake();
    if (shown.mode !== 'load') return;
    ui.loadLegend.replaceChildren();
    forgetLoads('Asking the leader for loads…');
    const cancel = new AbortController();
    loadPoll.cancel = cancel;
    const generation = loadPoll.generation;
    // After the aborted request has settled, so never two at once.
    setTimeout(() => pollLoads(generation, cancel.signal), 0);
  }

  ui.colourOwner.addEventListener('click', () => colourBy('owner'));
  ui.colourLoad.addEventListener('click', () => colourBy('load'));

  // ---- the next plan, not committed (PROTOCOL P17.4) ------------------------------------------

  /** "3 moves planned on revision 42: 2 drain, 1 join", or that nothing would move. */
  function planSummary(plan) {
    const rollout = plan.rollout_to
      ? 'rollout to version ' + plan.rollout_to + ' under way, balance and joiners wait: '
      : '';
    return rollout + planMoves(plan);
  }

  function planMoves(plan) {
    if (!plan.moves.length) return 'nothing would move (revision ' + plan.revision + ')';
    const byReason = new Map();
    for (const step of plan.moves) byReason.set(step.reason, (byReason.get(step.reason) || 0) + 1);
    const reasons = [...byReason].map(([reason, count]) => count + ' ' + reason).join(', ');
    return plan.moves.length + ' moves planned on revision ' + plan.revision + ': ' + reasons +
      (plan.capped ? ' (cut at the cap: more follow)' : '');
  }

  ui.planAsk.addEventListener('click', async () => {
    ui.planSummary.className = '';
    ui.planSummary.textContent = 'asking the leader…';
    // The plan of the namespace shown when asked; another chosen meanwhile drops the answer.
    const generation = space.generation;
    try {
      const { text } = await fetchText(inSpace('/v1/plan'), STOP_CHECK_ABORT_MS);
      if (generation !== space.generation) return;
      ui.planSummary.textContent = planSummary(JSON.parse(text));
    } catch (error) {
      if (generation !== space.generation) return;
      ui.planSummary.className = 'unsafe';
      ui.planSummary.textContent = 'next plan: ' + error.message;
    }
  });

  // ---- the audit log (PROTOCOL P17.4) ---------------------------------------------------------

  /** An audit record's time, RFC 3339 in UTC to the millisecond, as leaseholdctl prints it. */
  function utcMillis(atMs) {
    try {
      return new Date(atMs).toISOString();
    } catch (_) {
      return atMs + ' ms after the epoch';
    }
  }

  /** What a record names: its shard, executor and manager, whichever it has. */
  function auditSubject(record) {
    const parts = [];
    if (record.shard !== undefined && record.shard !== null) parts.push('shard ' + record.shard);
    if (record.executor_id) parts.push('executor ' + labelWithId(record.executor_id));
    if (record.node_id !== undefined && record.node_id !== null) {
      parts.push('manager ' + record.node_id + (record.address ? ' (' + record.address + ')' : ''));
    }
    return parts.length ? parts.join(', ') : '—';
  }

  function renderAudit(records) {
    const rows = document.createDocumentFragment();
    for (const record of [...records].reverse()) {
      const tr = node('tr');
      tr.dataset.revision = record.revision;
      tr.dataset.action = record.action;
      const at = utcMillis(record.at_ms);
      const time = node('time', null, at);
      if (at.endsWith('Z')) time.dateTime = at;
      const when = node('td', 'mono');
      when.append(time);
      tr.append(
        node('td', 'num', record.revision),
        when,
        node('td', 'actor', record.actor),
        node('td', 'mono', record.action),
        node('td', 'subject', auditSubject(record)),
      );
      rows.append(tr);
    }
    if (!records.length) {
      const tr = node('tr', 'empty');
      const td = node('td', null, 'no operator actions recorded');
      td.colSpan = 5;
      tr.append(td);
      rows.append(tr);
    }
    ui.audit.replaceChildren(rows);
    ui.auditRecords.hidden = false;
  }

  const auditAsk = { inFlight: false };

  ui.auditAsk.addEventListener('click', async () => {
    if (auditAsk.inFlight) return;
    auditAsk.inFlight = true;
    ui.auditAsk.setAttribute('aria-busy', 'true');
    ui.auditSummary.className = '';
    ui.auditSummary.textContent = 'asking the leader…';
    try {
      const { text } = await fetchText('../v1/audit', AUDIT_ABORT_MS);
      const records = JSON.parse(text);
      renderAudit(records);
      ui.auditSummary.textContent = records.length
        ? plural(records.length, 'operator action') + ', newest first'
        : 'no operator actions recorded';
    } catch (error) {
      // Refused (403 under TLS without the admin role), no leader, no answer: the reason, and
      // no records that might be mistaken for the current ones.
      ui.audit.replaceChildren();
      ui.auditRecords.hidden = true;
      ui.auditSummary.className = 'unsafe';
      ui.auditSummary.textContent = 'audit log: ' + error.message;
    } finally {
      auditAsk.inFlight = false;
      ui.auditAsk.removeAttribute('aria-busy');
    }
  });

  // ---- safe to stop? (PROTOCOL P17.4) ---------------------------------------------------------

  /** `manager N` (or a bare number) asks about a manager; anything else is an executor id. */
  function stopCheckTarget(subject) {
    const manager = /^(?:manager\s+)?(\d+)$/i.exec(subject);
    if (manager) {
      return { what: 'manager ' + manager[1], url: '/v1/cluster/nodes/' + manager[1] + '/safe-to-stop' };
    }
    return { what: 'executor ' + subject, url: '/v1/executors/' + encodeURIComponent(subject) + '/safe-to-stop' };
  }

  ui.stopCheck.addEventListener('submit', async (event) => {
    event.preventDefault();
    const subject = ui.stopCheckSubject.value.trim();
    if (!subject) {
      ui.stopCheckVerdict.className = 'unsafe';
      ui.stopCheckVerdict.textContent = 'name an executor id, or manager N';
      return;
    }
    const { what, url } = stopCheckTarget(subject);
    ui.stopCheckVerdict.className = '';
    ui.stopCheckVerdict.textContent = what + ': asking the leader…';
    try {
      const { text } = await fetchText(url, STOP_CHECK_ABORT_MS);
      const verdict = JSON.parse(text);
      ui.stopCheckVerdict.className = verdict.safe ? 'safe' : 'unsafe';
      ui.stopCheckVerdict.textContent =
        what + ': ' + (verdict.safe ? 'safe to stop' : 'not safe to stop') + ': ' + verdict.reason;
    } catch (error) {
      ui.stopCheckVerdict.className = 'unsafe';
      ui.stopCheckVerdict.textContent = what + ': ' + error.message;
    }
  });

  // ---- members -------------------------------------------------------------------------------

  function memberState(info) {
    if (!info) return 'unreachable';
    if (info.leader_id === info.node_id) return 'leader';
    return info.leader_id === null || info.leader_id === undefined ? 'candidate' : 'follower';
  }

  function renderMembers(reply) {
    const rows = document.createDocumentFragment();
    const own = reply.members.find((m) => m.node_id === reply.node_id);
    const ownInfo = own && own.info;
    for (const m of reply.members) {
      const info = m.info;
      const state = memberState(info);
      const tr = node('tr', state);
      tr.dataset.node = m.node_id;
      tr.dataset.state = state;
      const id = node('td', 'mono', m.node_id);
      if (m.node_id === reply.node_id) id.append(node('small', 'badge self', 'this page'));
      const stateCell = node('td');
      stateCell.append(node('span', 'badge ' + state, state));
      if (!info && m.error) stateCell.title = m.error;
      const release = (info && info.release) || (m.node_id === reply.node_id ? reply.release : null);
      tr.append(
        id,
        node('td', 'mono wide', m.address),
        node('td', 'wide', m.voter ? 'voter' : 'learner'),
        stateCell,
        node('td', 'num', info ? info.term : '—'),
        node('td', 'num wide', info ? opt(info.last_log_index) : '—'),
        node('td', 'num wide', info ? opt(info.committed_index) : '—'),
        node('td', 'num', info ? opt(info.applied_index) : '—'),
        node('td', 'num' + (m.lag > 0 ? ' lagging' : ''), opt(m.lag)),
        node('td', 'mono wide', opt(release)),
      );
      rows.append(tr);
    }
    ui.members.replaceChildren(rows);
    ui.members.parentNode.classList.remove('stale');
    ui.membersNote.textContent = '';
    ui.servedBy.textContent = 'manager ' + reply.node_id + (reply.release ? ' · ' + reply.release : '');

    const leaderId = ownInfo ? ownInfo.leader_id : null;
    const term = ownInfo ? ownInfo.term : null;
    ui.term.textContent = opt(term);
    ui.leader.dataset.leaderId = leaderId === null || leaderId === undefined ? '' : String(leaderId);
    ui.leader.textContent = leaderId === null || leaderId === undefined ? 'none (election)' : 'manager ' + leaderId;
    ui.leader.classList.toggle('none', leaderId === null || leaderId === undefined);
    if (shown.leaderId !== undefined && leaderId !== shown.leaderId) {
      if (leaderId === null || leaderId === undefined) feed('leader', 'no leader: an election is under way (term ' + opt(term) + ')');
      else if (shown.leaderId === null) feed('leader', 'manager ' + leaderId + ' leads (term ' + opt(term) + ')');
      else feed('leader', 'leader changed: manager ' + shown.leaderId + ' → manager ' + leaderId + ' (term ' + opt(term) + ')');
    }
    shown.leaderId = leaderId === undefined ? null : leaderId;
  }

  const members = { inFlight: false, wanted: false, lastAt: -Infinity, timer: 0 };

  /** Asks for the members now, or as soon as the gap since the last ask allows (never two at once). */
  function refreshMembers() {
    if (members.inFlight) {
      members.wanted = true;
      return;
    }
    if (members.timer) return;
    const wait = members.lastAt + MEMBERS_MIN_GAP_MS - performance.now();
    if (wait > 0) {
      members.timer = setTimeout(() => {
        members.timer = 0;
        refreshMembers();
      }, wait);
      return;
    }
    members.inFlight = true;
    members.wanted = false;
    members.lastAt = performance.now();
    stats.membersRequests++;
    fetchText('members', MEMBERS_ABORT_MS)
      .then(({ text }) => renderMembers(JSON.parse(text)))
      .catch((error) => {
        ui.members.parentNode.classList.add('stale');
        ui.membersNote.textContent = 'not refreshed: ' + error.message;
      })
      .finally(() => {
        members.inFlight = false;
        if (members.wanted) refreshMembers();
      });
  }
  setInterval(() => {
    if (performance.now() - members.lastAt >= MEMBERS_IDLE_MS) refreshMembers();
  }, 1000);

  // ---- namespaces (PROTOCOL P18.1) ------------------------------------------------------------

  /** The namespace shown; `generation` counts the changes, so a late answer for another is dropped. */
  const space = { name: DEFAULT_NAMESPACE, generation: 0 };

  /**
   * `url` naming the namespace shown. `default` is named by naming none: the same answer, and
   * the very requests the page sent before namespaces.
   */
  function inSpace(url) {
    if (space.name === DEFAULT_NAMESPACE) return url;
    return url + (url.includes('?') ? '&' : '?') + 'namespace=' + encodeURIComponent(space.name);
  }

  /** The namespace the page's address names (`#namespace=NAME`, else `?namespace=NAME`), or null. */
  function namespaceInAddress() {
    const hash = new URLSearchParams(location.hash.replace(/^#/, ''));
    if (hash.has('namespace')) return hash.get('namespace');
    const query = new URLSearchParams(location.search);
    return query.has('namespace') ? query.get('namespace') : null;
  }

  /** Keeps `name` in the address (none for `default`), so a reload or a shared link shows it. */
  function keepInAddress(name) {
    const query = new URLSearchParams(location.search);
    query.delete('namespace');
    const search = query.toString();
    const address = location.pathname + (search ? '?' + search : '') +
      (name === DEFAULT_NAMESPACE ? '' : '#namespace=' + encodeURIComponent(name));
    if (address !== location.pathname + location.search + location.hash) {
      // replaceState fires no hashchange: the page changes namespace only once.
      history.replaceState(null, '', address);
    }
  }

  const namespaces = { views: [], listed: '', inFlight: false, wanted: false, lastAt: -Infinity, timer: 0 };

  /**
   * An option's text: the name, its shard count and executors, as listed last, its replicas per
   * shard when more than one (PROTOCOL §19; absent from the view at one), its generation once it
   * resharded and the reshard under way (§20; both absent before).
   */
  function namespaceText(view) {
    if (typeof view.shard_count !== 'number') return view.name;
    let text = view.name + ' · ' + plural(view.shard_count, 'shard') + ' · ' + plural(Number(view.executors) || 0, 'executor');
    if (Number(view.replicas) > 1) text += ' · ' + view.replicas + ' replicas';
    if (Number(view.generation) > 0) text += ' · generation ' + view.generation;
    const reshard = view.reshard;
    if (reshard && typeof reshard.shard_count === 'number') {
      text += ' · ' + (reshard.kind === 'merge' ? 'merging' : 'splitting') + ' to ' + reshard.shard_count;
    }
    return text;
  }

  /**
   * The selector: every namespace listed, `default` always (a cluster not yet initialised lists
   * none) and the one shown (until its watch says it is gone). Its options are replaced only when
   * the list changed, so an open selector is not disturbed every refresh.
   */
  function renderNamespaces() {
    const views = namespaces.views.filter((v) => v && typeof v.name === 'string');
    for (const name of [DEFAULT_NAMESPACE, space.name]) {
      if (!views.some((v) => v.name === name)) views.push({ name });
    }
    views.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    const options = views.map((v) => [v.name, namespaceText(v)]);
    const listed = JSON.stringify(options);
    if (listed !== namespaces.listed) {
      namespaces.listed = listed;
      ui.namespace.replaceChildren(...options.map(([value, text]) => new Option(text, value)));
    }
    ui.namespace.value = space.name;
  }

  /** Asks for the namespaces now, or as soon as the gap since the last ask allows (never two at once). */
  function refreshNamespaces() {
    if (namespaces.inFlight) {
      namespaces.wanted = true;
      return;
    }
    if (namespaces.timer) return;
    const wait = namespaces.lastAt + NAMESPACES_MIN_GAP_MS - performance.now();
    if (wait > 0) {
      namespaces.timer = setTimeout(() => {
        namespaces.timer = 0;
        refreshNamespaces();
      }, wait);
      return;
    }
    namespaces.inFlight = true;
    namespaces.wanted = false;
    namespaces.lastAt = performance.now();
    stats.namespacesRequests++;
    fetchText('../v1/namespaces', NAMESPACES_ABORT_MS)
      .then(({ text }) => {
        const list = JSON.parse(text);
        if (!Array.isArray(list)) throw new Error('not a list of namespaces');
        namespaces.views = list;
        renderNamespaces();
        ui.namespace.classList.remove('stale');
        ui.namespace.title = 'the shard space shown (PROTOCOL P18.1)';
      })
      .catch((error) => {
        // The selector keeps what it listed; the page goes on showing the namespace it shows.
        ui.namespace.classList.add('stale');
        ui.namespace.title = 'namespaces not refreshed: ' + error.message;
      })
      .finally(() => {
        namespaces.inFlight = false;
        if (namespaces.wanted) refreshNamespaces();
      });
  }
  setInterval(() => {
    if (performance.now() - namespaces.lastAt >= NAMESPACES_REFRESH_MS) refreshNamespaces();
  }, 1000);

  /** Forgets everything drawn for the namespace left: the next state is drawn as a first one. */
  function forgetState() {
    shown.view = null;
    shown.viewAt = 0;
    shown.count = -1;
    shown.cells = [];
    shown.owners = [];
    shown.epochs = [];
    shown.handoffs = [];
    shown.pins = [];
    shown.executors = new Map();
    shown.names = new Map();
    shown.colours = new Map();
    shown.bars = [];
    shown.focus = 0;
    shown.pointed = -1;
    shown.classes = [];
    shown.loads = [];
    shown.hot = [];
    shown.polled = new Map();
    shown.utilisationCells = new Map();
    stats.revision = null;
    ui.grid.replaceChildren();
    ui.detail.textContent = DETAIL_HINT;
    ui.legend.replaceChildren();
    ui.loadLegend.replaceChildren();
    ui.shardStats.textContent = '';
    const waiting = node('tr', 'empty');
    const td = node('td', null, 'waiting for namespace ' + space.name);
    td.colSpan = 9;
    waiting.append(td);
    ui.executors.replaceChildren(waiting);
    for (const field of [ui.revision, ui.executorCount, ui.shardCount, ui.lease]) field.textContent = '—';
    ui.planSummary.className = '';
    ui.planSummary.textContent = '';
    // The feed told the namespace left's story: it starts again with the one shown.
    ui.changes.replaceChildren(placeholder);
    feed('namespace', 'showing namespace ' + space.name);
    setLink('connecting', 'connecting');
  }

  /** Shows namespace `name` (a checked name): the watch starts over from revision 0. */
  function showNamespace(name) {
    keepInAddress(name);
    if (name === space.name) return;
    space.name = name;
    space.generation++;
    stats.namespace = name;
    renderNamespaces();
    forgetState();
    // The watch loop's request is aborted, or its wait cut short: it asks for `name` at once.
    if (watch.cancel) watch.cancel.abort();
    if (watch.wake) watch.wake();
    restartLoads();
  }

  /** `name` cannot be shown (`why`): `default` is, with a notice that says so. */
  function fallBack(name, why) {
    const named = name.length > 64 ? name.slice(0, 63) + '…' : name;
    ui.namespaceNote.textContent = 'Namespace “' + named + '” ' + why + ': showing ' + DEFAULT_NAMESPACE + ' instead.';
    ui.namespaceNote.hidden = false;
    showNamespace(DEFAULT_NAMESPACE);
    refreshNamespaces();
  }

  /** Shows the namespace a person or an address asked for, if it is a name at all. */
  function choose(name) {
    if (!NAMESPACE_NAME.test(name)) {
      fallBack(name, 'is not a namespace name');
      return;
    }
    ui.namespaceNote.hidden = true;
    showNamespace(name);
  }

  ui.namespace.addEventListener('change', () => choose(ui.namespace.value));
  // An address edited by hand (the page itself changes it with replaceState, which fires none).
  window.addEventListener('hashchange', () => choose(namespaceInAddress() ?? DEFAULT_NAMESPACE));

  // ---- connection ----------------------------------------------------------------------------

  function setLink(state, text) {
    ui.link.dataset.state = state;
    ui.linkText.textContent = text;
  }

  /** The watch loop's request in flight and the end of its pause, for a change of namespace. */
  const watch = { cancel: null, wake: null };

  /** Waits `ms`, or less if another namespace is chosen meanwhile (watch.wake ends the wait). */
  function pauseWatch(ms) {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        watch.wake = null;
        resolve();
      };
      const timer = setTimeout(done, ms);
      watch.wake = done;
    });
  }

  async function follow() {
    let generation = space.generation;
    let revision = 0;
    let backoff = BACKOFF_FIRST_MS;
    let failures = 0;
    for (;;) {
      if (generation !== space.generation) {
        // Another namespace: from revision 0, as on the page's first load.
        generation = space.generation;
        revision = 0;
        backoff = BACKOFF_FIRST_MS;
        failures = 0;
        ui.banner.hidden = true;
      }
      const cancel = new AbortController();
      watch.cancel = cancel;
      try {
        stats.watchRequests++;
        const url = inSpace('../v1/watch?revision=' + revision + '&wait=' + WATCH_WAIT);
        const { text, receivedAt } = await fetchText(url, WATCH_ABORT_MS, cancel.signal);
        watch.cancel = null;
        if (generation !== space.generation) continue;
        const first = shown.view === null;
        const started = performance.now();
        const reply = JSON.parse(text);
        applyState(reply, receivedAt);
        const busyMs = performance.now() - started;
        if (first) {
          stats.renderMs = Math.round(busyMs);
          window.__consoleRenderMs = stats.renderMs;
          requestAnimationFrame(() => setTimeout(() => {
            stats.firstFrameMs = Math.round(performance.now() - started);
          }, 0));
        }
        revision = reply.state.revision;
        if (failures > 0) feed('online', 'reconnected after ' + plural(failures, 'failed attempt') + ', at revision ' + revision);
        failures = 0;
        backoff = BACKOFF_FIRST_MS;
        ui.banner.hidden = true;
        setLink('live', 'live · revision ' + revision);
        refreshMembers();
        await pauseWatch(Math.min(MAX_WATCH_GAP_MS, Math.max(MIN_WATCH_GAP_MS, BUSY_FACTOR * busyMs)));
      } catch (error) {
        watch.cancel = null;
        // Cut short by a change of namespace: the next request is for the new one.
        if (generation !== space.generation) continue;
        if (error.status === 404 && space.name !== DEFAULT_NAMESPACE) {
          // Deleted, or never there: `default` (which always exists) instead, once.
          fallBack(space.name, 'does not exist (any more)');
          continue;
        }
        failures++;
        if (failures === 1) feed('offline', 'lost the watch: ' + error.message);
        ui.bannerText.textContent = '— ' + error.message + '; next try in ' + seconds(backoff) + ' (attempt ' + failures + ')';
        ui.banner.hidden = false;
        setLink('retrying', 'retrying');
        await pauseWatch(backoff);
        backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
      }
    }
  }

  const placeholder = node('li', 'empty', 'No changes seen yet.');
  ui.changes.append(placeholder);
  // The namespace the address names, if any; anything else is `default`'s page as before.
  const asked = namespaceInAddress();
  if (asked !== null && asked !== DEFAULT_NAMESPACE) {
    if (NAMESPACE_NAME.test(asked)) {
      space.name = asked;
      stats.namespace = asked;
    } else {
      fallBack(asked, 'is not a namespace name');
    }
  }
  renderNamespaces();
  refreshNamespaces();
  refreshMembers();
  follow();
})();
