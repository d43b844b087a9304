// Turnstile operator console. Plain browser JavaScript, no build step, no library.
//
// Every figure comes from the JSON API under /v1/ (with the API key as a bearer header when
// the server has one). Pages are built with DOM calls and text nodes only: user text is never
// parsed as HTML, so a message like <img src=x onerror=alert(1)> shows as those characters.
'use strict';
(() => {
  // ---- settings (every loop and buffer here is bounded by one of these) ----
  /** Overview refresh period; the server samples every 2 s, so faster would show nothing new. */
  const REFRESH_MS = 2000;
  // Audit records the overview shows.
  const AUDIT_SHOWN = 8;
  /** Page sizes offered on the sessions list (the API's largest page is 1000). */
  const PAGE_SIZES = [100, 1000];
  /** Transcript entries fetched per request, and the most a session page holds. */
  const TRANSCRIPT_PAGE = 500;
  const TRANSCRIPT_MAX = 5000;
  /** Live replies kept on a session page (older ones scroll away). */
  const LIVE_MAX = 100;
  /** Characters of a block's content shown before "more". */
  const PREVIEW_CHARS = 240;
  /** Pause before re-opening a broken event stream. */
  const STREAM_RETRY_MS = 5000;
  /** Where the API key lives: this tab's session storage (never a cookie, never a URL). */
  const KEY_STORE = 'turnstile.apiKey';

  // ---- DOM helpers: text only ----
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    setAttrs(el, attrs);
    append(el, children);
    return el;
  }
  const SVG_NS = 'http://www.w3.org/2000/svg';
  function s(tag, attrs, ...children) {
    const el = document.createElementNS(SVG_NS, tag);
    setAttrs(el, attrs);
    append(el, children);
    return el;
  }
  function setAttrs(el, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  function append(el, children) {
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
  }
  const $ = (id) => document.getElementById(id);
  function clear(el) { while (el.firstChild) el.removeChild(el.firstChild); return el; }

  // ---- formatting ----
  const int = (n) => (n === null || n === undefined ? '–' : Math.round(n).toLocaleString('en-US'));
  function bytes(n) {
    if (n === null || n === undefined) return '–';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0; let v = n;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
    return (i === 0 ? String(v) : v.toFixed(v < 10 ? 2 : 1)) + ' ' + units[i];
  }
  function ms(v) {
    if (v === null || v === undefined) return '–';
    if (v >= 1000) return (v / 1000).toFixed(2) + ' s';
    return (v >= 10 ? v.toFixed(0) : v.toFixed(2)) + ' ms';
  }
  function ago(atMs) {
    if (!atMs) return 'never';
    const d = Math.max(0, Date.now() - atMs) / 1000;
    if (d < 90) return Math.round(d) + ' s ago';
    if (d < 5400) return Math.round(d / 60) + ' min ago';
    if (d < 129600) return Math.round(d / 3600) + ' h ago';
    return Math.round(d / 86400) + ' d ago';
  }
  const iso = (atMs) => (atMs ? new Date(atMs).toISOString() : '');
  const pct = (r) => (r === null || r === undefined ? '–' : (r * 100).toFixed(1) + '%');

  // ---- the API ----
  class AuthNeeded extends Error {}
  function apiKey() {
    try { return sessionStorage.getItem(KEY_STORE) || ''; } catch (_) { return ''; }
  }
  function headers(extra) {
    const hd = Object.assign({ accept: 'application/json' }, extra || {});
    const key = apiKey();
    if (key) hd.authorization = 'Bearer ' + key;
    return hd;
  }
  async function api(path, opts) {
    const o = opts || {};
    const r = await fetch(path, {
      method: o.method || 'GET', headers: headers(o.headers), body: o.body,
      cache: 'no-store', credentials: 'omit', signal: o.signal,
    });
    if (r.status === 401) { askForKey(apiKey() ? 'That key was refused.' : ''); throw new AuthNeeded(); }
    const text = await r.text();
    let body = null;
    try { body = text ? JSON.parse(text) : null; } catch (_) { body = text; }
    if (!r.ok) {
      const err = body && body.error ? body.error.code + ': ' + body.error.message : 'HTTP ' + r.status;
      const e = new Error(err); e.status = r.status; throw e;
    }
    return body;
  }
  const enc = encodeURIComponent;

  // ---- chrome: status line, notices, the key form ----
  function status(text) { $('status').textContent = text; }
  function notice(text, kind) {
    const n = $('notice');
    n.className = 'notice' + (kind ? ' ' + kind : '');
    n.textContent = text;
    n.hidden = !text;
  }
  function fail(e) {
    if (e instanceof AuthNeeded) return;
    notice(String(e && e.message ? e.message : e), 'bad');
  }
  function askForKey(why) {
    $('login').hidden = false;
    const err = $('login-error');
    err.textContent = why || '';
    err.hidden = !why;
    $('api-key').focus();
  }
  function setupChrome() {
    $('login-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const key = $('api-key').value.trim();
      if (!key) return;
      try { sessionStorage.setItem(KEY_STORE, key); } catch (_) { /* storage off: lost on reload */ }
      $('api-key').value = '';
      $('login').hidden = true;
      $('forget-key').hidden = false;
      start();
    });
    const forget = $('forget-key');
    forget.hidden = !apiKey();
    forget.addEventListener('click', () => {
      try { sessionStorage.removeItem(KEY_STORE); } catch (_) { /* nothing kept */ }
      forget.hidden = true;
      askForKey('');
    });
  }

  // ---- refresh scheduling: at most every REFRESH_MS, paused while the tab is hidden ----
  let refreshTimer = null;
  let refreshFn = null;
  let refreshing = false;
  async function runRefresh() {
    clearTimeout(refreshTimer);
    refreshTimer = null;
    if (!refreshFn || refreshing || document.hidden) return;
    refreshing = true;
    try {
      await refreshFn();
    } catch (e) {
      // Without the key there is nothing to refresh: the key form restarts the page.
      if (e instanceof AuthNeeded) { refreshFn = null; return; }
      fail(e);
    } finally { refreshing = false; }
    if (refreshFn && !document.hidden) refreshTimer = setTimeout(runRefresh, REFRESH_MS);
  }
  document.addEventListener('visibilitychange', () => {
    if (document.hidden) { clearTimeout(refreshTimer); refreshTimer = null; status('paused'); }
    else runRefresh();
  });

  // ---- charts (inline SVG) ----
  function lineChart(name, title, series, unit, spanSeconds) {
    const W = 600; const H = 170; const L = 48; const R = 10; const T = 18; const B = 22;
    const points = series.flatMap((x) => x.values.filter((v) => v[1] !== null));
    const max = Math.max(1e-9, ...points.map((p) => p[1]));
    const top = niceCeil(max);
    const now = Date.now();
    const x = (t) => L + (W - L - R) * (1 - Math.min(spanSeconds, Math.max(0, (now - t) / 1000)) / spanSeconds);
    const y = (v) => T + (H - T - B) * (1 - v / top);
    const svg = s('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': title, 'data-chart': name });
    svg.append(s('text', { x: L, y: 12 }, title));
    for (const f of [0, 0.5, 1]) {
      svg.append(s('line', { class: 'grid', x1: L, x2: W - R, y1: y(top * f), y2: y(top * f) }));
      svg.append(s('text', { x: 4, y: y(top * f) + 4 }, fmtAxis(top * f, unit)));
    }
    svg.append(s('text', { x: L, y: H - 6 }, '−' + Math.round(spanSeconds / 60) + ' min'));
    svg.append(s('text', { x: W - R - 24, y: H - 6 }, 'now'));
    series.forEach((ser, i) => {
      const pts = ser.values.filter((v) => v[1] !== null).map((v) => `${x(v[0]).toFixed(1)},${y(v[1]).toFixed(1)}`);
      if (pts.length > 0) svg.append(s('polyline', { class: 's' + i, points: pts.join(' '), 'data-series': ser.name }));
      // A lone sample has no line: mark the newest point.
      const last = pts[pts.length - 1];
      if (last) { const [cx, cy] = last.split(','); svg.append(s('circle', { class: 's' + i, cx, cy, r: 2.5 })); }
    });
    const legend = h('div', { class: 'legend' }, series.map((ser, i) => h('span', { class: 'k' + i }, '— ' + ser.name)));
    return h('div', { class: 'card' }, svg, legend);
  }
  function niceCeil(v) {
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }
  function fmtAxis(v, unit) {
    if (v === 0) return '0';
    if (unit === 'ms') return ms(v);
    return v >= 100 ? int(v) : String(Math.round(v * 10) / 10);
  }
  function diskBar(used, max, high) {
    const W = 1000;
    const sx = (b) => (max > 0 ? Math.min(W, (W * b) / max) : 0);
    return s('svg', { class: 'bar', viewBox: `0 0 ${W} 26`, preserveAspectRatio: 'none', role: 'img',
      'aria-label': `disk ${bytes(used)} of ${bytes(max)}, high water ${bytes(high)}` },
    s('rect', { class: 'track', x: 0, y: 4, width: W, height: 18 }),
    s('rect', { class: 'used' + (used > high ? ' over' : ''), x: 0, y: 4, width: sx(used).toFixed(1), height: 18 }),
    s('line', { class: 'mark', x1: sx(high), x2: sx(high), y1: 0, y2: 26 }));
  }
  function tokenBar(tokens, total) {
    const W = 120;
    const w = total > 0 ? Math.max(1, Math.min(W, (W * tokens) / total)) : 0;
    return s('svg', { class: 'tokens', viewBox: `0 0 ${W} 10`, 'aria-hidden': 'true' },
      s('rect', { class: 'bg', x: 0, y: 0, width: W, height: 10 }),
      s('rect', { class: 't', x: 0, y: 0, width: w.toFixed(1), height: 10 }));
  }

  // ---- overview ----
  // Each shown figure carries its raw value in data-value (what /v1/stats said).
  const raw = (v) => (v === null || v === undefined ? '' : String(v));
  function figure(name, label, value, shown, sub) {
    return h('div', { class: 'card' },
      h('div', { class: 'label' }, label),
      h('div', { class: 'value', 'data-figure': name, 'data-value': raw(value) }, shown),
      sub ? (sub instanceof Node ? sub : h('div', { class: 'sub' }, sub)) : null);
  }
  const subFigure = (name, value, text) => h('div', { class: 'sub', 'data-figure': name, 'data-value': raw(value) }, text);
  let overviewRefreshes = 0;
  async function overview(main) {
    document.title = 'Overview · Turnstile';
    // The history is fetched whole once, then only what is newer (bounded by max_samples).
    const hist = { interval_seconds: 2, max_samples: 0, samples: [] };
    refreshFn = async () => {
      const last = hist.samples.length ? hist.samples[hist.samples.length - 1].at_ms : 0;
      const [st, fresh, audit, jobs] = await Promise.all([api('/v1/stats'), api('/v1/stats/history?after_ms=' + last),
        api('/v1/admin/audit?tail=' + AUDIT_SHOWN).catch(() => null), api('/v1/schedules').catch(() => null)]);
      hist.interval_seconds = fresh.interval_seconds;
      hist.max_samples = fresh.max_samples;
      hist.samples.push(...fresh.samples);
      if (hist.samples.length > hist.max_samples) hist.samples.splice(0, hist.samples.length - hist.max_samples);
      overviewRefreshes += 1;
      renderOverview(main, st, hist, audit, jobs);
      status('updated ' + new Date().toLocaleTimeString());
    };
    await runRefresh();
  }
  // The audit log's newest records (JSON lines), newest first.
  function auditCard(text) {
    const records = typeof text === 'string'
      ? text.split('\n').filter((l) => l).map((l) => { try { return JSON.parse(l); } catch (_) { return null; } }).filter((r) => r).reverse()
      : null;
    return h('div', { class: 'card wide', id: 'audit' },
      h('div', { class: 'label' }, 'Audit log (newest)'),
      records === null ? h('div', { class: 'sub' }, 'did not answer')
        : records.length === 0 ? h('div', { class: 'sub' }, 'no admin action or refused key yet')
          : records.map((r) => h('div', { class: 'sub', 'data-audit': r.action },
            `${ago(r.at_ms)} · ${r.action}${r.target ? ' ' + r.target : ''} → ${r.status}` +
            `${r.key_fingerprint ? ' · key ' + r.key_fingerprint : ' · no key'}${r.client ? ' · ' + r.client : ''}`)));
  }
  // One line per scheduled job: its cadence, when it is next due, and its last run's outcome.
  function schedulesCard(jobs) {
    const list = jobs && Array.isArray(jobs.data) ? jobs.data : null;
    if (list !== null && list.length === 0) return null;
    const until = (atMs) => {
      if (!atMs) return 'never again';
      const d = Math.max(0, atMs - Date.now()) / 1000;
      if (d < 90) return 'in ' + Math.round(d) + ' s';
      if (d < 5400) return 'in ' + Math.round(d / 60) + ' min';
      if (d < 129600) return 'in ' + Math.round(d / 3600) + ' h';
      return 'in ' + Math.round(d / 86400) + ' d';
    };
    const last = (r) => !r ? 'no run yet'
      : `last run ${ago(r.started_at_ms)}: ${r.status}${r.reply ? ' · ' + r.reply : ''}${r.error ? ' · ' + r.error : ''}`;
    return h('div', { class: 'card wide', id: 'schedules' },
      h('div', { class: 'label' }, 'Scheduled jobs'),
      list === null ? h('div', { class: 'sub' }, 'did not answer')
        : list.map((j) => h('div', { class: j.runs && j.runs[0] && j.runs[0].status === 'failed' ? 'sub error' : 'sub',
          'data-schedule': j.id, 'data-value': j.runs && j.runs[0] ? j.runs[0].status : '' },
        `${j.id}${j.heartbeat ? ' (heartbeat)' : ''} · ${j.cron ? j.cron + (j.time_zone ? ' ' + j.time_zone : '') : 'every ' + ms(j.every_ms)} · ` +
        `${j.session_key} · next ${until(j.next_due_ms)} · ${last(j.runs && j.runs[0])}`)));
  }
  function renderOverview(main, st, hist, audit, jobs) {
    const rc = st.recent || {};
    const j = st.janitor;
    const cards = h('div', { class: 'cards' },
      figure('sessions', 'Sessions', st.sessions, int(st.sessions), subFigure('transcript_entries', st.transcript_entries, int(st.transcript_entries) + ' transcript entries')),
      figure('live_lanes', 'Live lanes', st.live_lanes, int(st.live_lanes)),
      figure('queued_messages', 'Queued messages', st.queued_messages, int(st.queued_messages)),
      figure('turns_per_second', 'Turns/s (last minute)', rc.turns_per_second, rc.turns_per_second === undefined ? '–' : rc.turns_per_second.toFixed(1),
        subFigure('turns', st.turns, int(st.turns) + ' turns since start')),
      figure('turn_p50_ms', 'Turn latency p50', rc.turn_p50_ms, ms(rc.turn_p50_ms), 'last minute'),
      figure('turn_p99_ms', 'Turn latency p99', rc.turn_p99_ms, ms(rc.turn_p99_ms), 'last minute'),
      figure('model_errors', 'Model errors', st.model_errors, int(st.model_errors), rc.model_errors === undefined ? null : int(rc.model_errors) + ' in the last minute'),
      figure('compactions_run', 'Compactions', st.compactions_run, int(st.compactions_run), int(st.compactions) + ' recorded on sessions'),
      figure('evictions', 'Evictions', st.evictions, int(st.evictions), 'by the janitor since start'),
      figure('assembly_cache_hit_rate', 'Assembly cache hits', st.assembly_cache_hit_rate, pct(st.assembly_cache_hit_rate)));
    const disk = h('div', { class: 'card wide' },
      h('div', { class: 'label' }, 'Disk use against max_disk_bytes'),
      h('div', { class: 'value' }, h('span', { 'data-figure': 'disk_bytes', 'data-value': raw(st.disk_bytes) }, bytes(st.disk_bytes)),
        ' of ', h('span', { 'data-figure': 'max_disk_bytes', 'data-value': raw(st.max_disk_bytes) }, bytes(st.max_disk_bytes))),
      diskBar(st.disk_bytes, st.max_disk_bytes, st.high_water_bytes),
      subFigure('high_water_bytes', st.high_water_bytes, 'high water ' + bytes(st.high_water_bytes) + ' (the janitor frees space above it)'));
    const jan = h('div', { class: 'card wide' },
      h('div', { class: 'label' }, 'Janitor'),
      j ? [
        h('div', { class: 'value', 'data-figure': 'janitor_last_pass_at_ms', 'data-value': String(j.last_pass_at_ms || '') }, 'last pass ' + ago(j.last_pass_at_ms)),
        h('div', { class: 'sub' }, `${int(j.passes)} pass${j.passes === 1 ? '' : 'es'} · last: ${int(j.last_pass_sessions_evicted)} evicted, ${int(j.last_pass_archives_deleted)} archives deleted, ${bytes(j.last_pass_bytes_freed)} freed · measured ${bytes(j.measured_disk_bytes)}` + (j.enforcing ? '' : ' · warn mode')),
        h('div', { class: 'sub', 'data-figure': 'cold_deleted_total', 'data-value': raw(j.cold_deleted_total) }, `since start: ${int(j.sessions_frozen_total)} moved to the cold tier, ${int(j.cold_deleted_total)} cold sessions deleted for good`),
        j.last_error ? h('div', { class: 'sub error' }, 'last error: ' + j.last_error) : null,
      ] : h('div', { class: 'sub' }, 'did not answer'));
    const agents = h('div', { class: 'card wide', id: 'agents' },
      h('div', { class: 'label' }, 'Agents'),
      (st.agents || []).map((a) => h('div', { class: 'sub', 'data-agent': a.id, 'data-value': raw(a.turns) },
        `${a.id}${a.default ? ' (default)' : ''} · ${a.model} · ${int(a.turns)} turns since start · ${int(a.bindings)} binding${a.bindings === 1 ? '' : 's'}`)));
    // One line per MCP server (none configured: no card).
    const mcp = (st.mcp_servers || []).length === 0 ? null : h('div', { class: 'card wide', id: 'mcp-servers' },
      h('div', { class: 'label' }, 'MCP servers'),
      st.mcp_servers.map((m) => h('div', { class: m.status === 'down' ? 'sub error' : 'sub', 'data-mcp': m.name, 'data-value': m.status },
        `${m.name} (${m.transport}) · ${m.status}${m.status === 'up' ? ', ' + int(m.tools) + ' tools' : ''} · since ${ago(m.since_ms)}` +
        `${m.restarts ? ' · ' + int(m.restarts) + ' restarts' : ''}${m.error ? ' · ' + m.error : ''}`)));
    // One line per platform channel's connection (none configured: no card).
    const channels = (st.channels || []).length === 0 ? null : h('div', { class: 'card wide', id: 'channels' },
      h('div', { class: 'label' }, 'Channels'),
      st.channels.map((c) => h('div', { class: c.state === 'stopped' ? 'sub error' : 'sub', 'data-channel': c.channel, 'data-value': c.state },
        `${c.channel} · ${c.state.replace('_', ' ')} since ${ago(c.since_ms)}${c.reason ? ' · ' + c.reason : ''}`)));
    // `[[quotas]]`: refusals since start and the subjects refused most (no rules: no card).
    const q = st.quotas;
    const quotas = !q ? null : h('div', { class: 'card wide', id: 'quotas' },
      h('div', { class: 'label' }, 'Quotas'),
      h('div', { class: 'sub', 'data-figure': 'quota_refused_messages', 'data-value': raw(q.refused_messages) },
        `${int(q.rules)} rule${q.rules === 1 ? '' : 's'} · since start ${int(q.refused_messages)} messages refused over a message quota, ${int(q.refused_tokens)} over a token quota`),
      (q.top || []).map((o) => h('div', { class: 'sub', 'data-quota': o.subject, 'data-value': raw(o.refused) },
        `${o.subject} · ${int(o.refused)} refused`)));
    const samples = (hist && hist.samples) || [];
    const span = Math.max(60, (hist.interval_seconds || 2) * (hist.max_samples || samples.length));
    const charts = h('div', { class: 'charts' },
      lineChart('turns', 'Turns per second', [{ name: 'turns/s', values: samples.map((x) => [x.at_ms, x.turns_per_second]) }], '', span),
      lineChart('latency', 'Turn latency', [
        { name: 'p50', values: samples.map((x) => [x.at_ms, x.turn_p50_ms]) },
        { name: 'p99', values: samples.map((x) => [x.at_ms, x.turn_p99_ms]) },
      ], 'ms', span),
      lineChart('queue', 'Queued messages and live lanes', [
        { name: 'queued', values: samples.map((x) => [x.at_ms, x.queued_messages]) },
        { name: 'live lanes', values: samples.map((x) => [x.at_ms, x.live_lanes]) },
      ], '', span));
    const root = h('div', { id: 'overview', 'data-refreshes': String(overviewRefreshes) },
      h('h1', null, 'Overview'), cards, h('div', { class: 'cards' }, disk, jan, channels, mcp, quotas), charts,
      h('div', { class: 'cards' }, agents, schedulesCard(jobs), auditCard(audit)),
      h('p', { class: 'muted' }, `Refreshes every ${REFRESH_MS / 1000} s while this tab is visible; samples every ${hist.interval_seconds} s, ${samples.length} of ${hist.max_samples} kept.`));
    clear(main).append(root);
  }

  // ---- sessions ----
  async function sessionsPage(main) {
    document.title = 'Sessions · Turnstile';
    const state = { limit: PAGE_SIZES[0], cursors: [null], rows: [], sort: 'session_key', dir: 1, filter: '' };
    const search = h('input', { id: 'session-search', type: 'search', placeholder: 'filter this page by key…', 'aria-label': 'filter sessions' });
    const size = h('select', { id: 'page-size', 'aria-label': 'page size' }, PAGE_SIZES.map((n) => h('option', { value: n }, n + ' per page')));
    const prev = h('button', { id: 'prev-page', type: 'button' }, '← previous');
    const next = h('button', { id: 'next-page', type: 'button' }, 'next →');
    const info = h('span', { class: 'muted', id: 'page-info' });
    const table = h('table', { id: 'sessions' });
    clear(main).append(h('h1', null, 'Sessions'), h('div', { class: 'toolbar' }, search, size, prev, next, info), table);
    const cols = [
      ['session_key', 'Key', false], ['updated_at_ms', 'Updated', true], ['entries', 'Entries', true],
      ['tokens', 'Tokens', true], ['bytes', 'Bytes', true], ['compaction_count', 'Compactions', true],
      ['agent', 'Agent', false],
    ];
    const render = () => {
      const f = state.filter.toLowerCase();
      const rows = state.rows.filter((r) => !f || r.session_key.toLowerCase().includes(f));
      rows.sort((a, b) => {
        const x = a[state.sort]; const y = b[state.sort];
        return (x < y ? -1 : x > y ? 1 : 0) * state.dir;
      });
      const head = h('tr', null, cols.map(([k, label, num]) => h('th', {
        class: 'sortable' + (num ? ' num' : ''), 'data-sort': k, scope: 'col',
        'aria-sort': state.sort === k ? (state.dir > 0 ? 'ascending' : 'descending') : 'none',
        onclick: () => { if (state.sort === k) state.dir = -state.dir; else { state.sort = k; state.dir = num ? -1 : 1; } render(); },
      }, label)));
      const body = rows.map((r) => h('tr', { 'data-key': r.session_key },
        h('td', { class: 'key' }, h('a', { href: '/ui/sessions/' + enc(r.session_key) }, r.session_key)),
        h('td', { class: 'num', title: iso(r.updated_at_ms) }, ago(r.updated_at_ms)),
        h('td', { class: 'num' }, int(r.entries)), h('td', { class: 'num' }, int(r.tokens)),
        h('td', { class: 'num' }, bytes(r.bytes)), h('td', { class: 'num' }, int(r.compaction_count)),
        h('td', { class: 'agent' }, r.agent || '')));
      clear(table).append(h('thead', null, head), h('tbody', null, body));
      info.textContent = `page ${state.cursors.length} · ${rows.length} of ${state.rows.length} shown`;
      prev.disabled = state.cursors.length <= 1;
      next.disabled = state.rows.length < state.limit;
    };
    const load = async () => {
      const after = state.cursors[state.cursors.length - 1];
      const q = `/v1/sessions?limit=${state.limit}` + (after === null ? '' : '&after=' + enc(after));
      state.rows = await api(q);
      render();
    };
    search.addEventListener('input', () => { state.filter = search.value; render(); });
    size.addEventListener('change', () => { state.limit = Number(size.value); state.cursors = [null]; load().catch(fail); });
    next.addEventListener('click', () => {
      // The API pages by key: the next page starts after this page's last key.
      const last = state.rows[state.rows.length - 1];
      if (last === undefined) return;
      state.cursors.push(last.session_key); load().catch(fail);
    });
    prev.addEventListener('click', () => { if (state.cursors.length > 1) { state.cursors.pop(); load().catch(fail); } });
    await load();
  }

  // ---- one session ----
  function speaker(e) {
    switch (e.kind) {
      case 'user': return e.sender_name || e.sender || 'user';
      case 'assistant': return 'assistant';
      case 'summary': return 'summary';
      case 'tool_call': case 'tool_result': return 'tool';
      case 'system_event': return 'system event';
      default: return e.kind;
    }
  }
  function entryItem(e) {
    return h('li', { 'data-seq': String(e.seq), 'data-kind': e.kind },
      h('div', { class: 'meta' }, h('span', { class: 'who' }, speaker(e)), h('span', { class: 'badge ' + e.kind }, e.kind),
        ` #${e.seq} · ${iso(e.timestamp_ms)} · ${int(e.tokens)} tokens` + (e.message_id ? ' · id ' + e.message_id : '')),
      h('pre', { class: 'text' }, e.text));
  }
  function preview(text) {
    const t = String(text || '');
    if (t.length <= PREVIEW_CHARS) return h('pre', { class: 'text' }, t);
    return h('details', null, h('summary', null, h('span', { class: 'text' }, t.slice(0, PREVIEW_CHARS) + '…')), h('pre', { class: 'text' }, t));
  }
  function inspector(dump) {
    const total = dump.budget ? dump.budget.total : 0;
    const kept = (dump.blocks || []).map((b, i) => h('tr', {
      class: b.placement === 'prefix' ? 'prefix' : null, 'data-source': b.source, 'data-placement': b.placement,
    },
    h('td', { class: 'num' }, String(i + 1)),
    h('td', null, b.source, b.placement === 'prefix' ? [' ', h('span', { class: 'badge prefix' }, 'stable prefix')] : null),
    h('td', null, h('span', { class: 'badge ' + b.kind }, b.kind), ' ', h('span', { class: 'muted' }, b.placement)),
    h('td', { class: 'num' }, String(b.priority) + (b.immutable ? ' (fixed)' : '')),
    h('td', { class: 'num' }, int(b.token_count), ' ', tokenBar(b.token_count, total)),
    h('td', null, preview(b.content))));
    const dropped = (dump.dropped || []).map((d) => h('tr', { class: 'dropped', 'data-dropped-by': d.dropped_by, 'data-source': d.source },
      h('td', null, d.source), h('td', null, h('span', { class: 'badge ' + d.kind }, d.kind)),
      h('td', { class: 'num' }, String(d.priority)), h('td', { class: 'num' }, int(d.token_count)),
      h('td', { class: 'stage' }, d.dropped_by), h('td', { class: 'reason' }, d.reason),
      h('td', null, preview(d.preview))));
    const budget = dump.budget || {};
    return h('section', { id: 'inspector' },
      h('h2', null, 'Context inspector'),
      h('p', { class: 'muted' }, `What the next turn would send, in order. ${int(budget.used)} of ${int(budget.total)} budget tokens used (${int(budget.reserved)} reserved for the answer)`
        + `; stable prefix ${int(dump.stable_prefix_tokens)} tokens; ${kept.length} blocks kept, ${dropped.length} dropped; ${int(dump.older_entries_not_loaded)} older entries not loaded`
        + (dump.over_budget ? '; OVER BUDGET (the fixed blocks alone exceed it)' : '') + '.'),
      h('table', { id: 'kept-blocks' }, h('thead', null, h('tr', null, ['#', 'Source', 'Kind', 'Priority', 'Tokens', 'Content'].map((c) => h('th', null, c)))), h('tbody', null, kept)),
      h('h2', { id: 'dropped-heading' }, 'Dropped blocks'),
      dropped.length === 0 ? h('p', { class: 'muted', id: 'no-dropped' }, 'Nothing was dropped.')
        : h('table', { id: 'dropped-blocks' }, h('thead', null, h('tr', null, ['Source', 'Kind', 'Priority', 'Tokens', 'Dropped by', 'Reason', 'Content'].map((c) => h('th', null, c)))), h('tbody', null, dropped)),
      dump.stages ? h('p', { class: 'muted' }, 'Sources: ' + dump.stages.sources.join(', ') + ' · processors: ' + dump.stages.processors.join(', ')) : null);
  }
  async function sessionPage(main, key) {
    document.title = key + ' · Turnstile';
    const base = '/v1/sessions/' + enc(key);
    const info = h('p', { class: 'muted', id: 'session-info' });
    const actions = h('div', { class: 'toolbar', id: 'actions' });
    const top = h('div'); const left = h('div'); const right = h('div');
    const live = h('ul', { class: 'entries', id: 'live' });
    clear(main).append(h('h1', { id: 'session-key' }, key), info, actions, top, h('div', { class: 'split' }, left, right));
    let gone = false;
    const loadInfo = async () => {
      const si = await api(base);
      info.textContent = `agent ${si.agent} · ${int(si.entries)} entries · ${int(si.tokens)} tokens · ${bytes(si.bytes)} · ${int(si.compaction_count)} compactions · updated ${ago(si.updated_at_ms)} (${iso(si.updated_at_ms)})`;
    };
    const loadTranscript = async () => {
      const all = [];
      let after = 0;
      while (all.length < TRANSCRIPT_MAX) {
        const page = await api(`${base}/transcript?after=${after}&limit=${TRANSCRIPT_PAGE}`);
        all.push(...page);
        if (page.length < TRANSCRIPT_PAGE) break;
        after = page[page.length - 1].seq;
      }
      const more = all.length >= TRANSCRIPT_MAX ? h('p', { class: 'muted' }, `Showing the first ${TRANSCRIPT_MAX} entries.`) : null;
      const list = h('ul', { class: 'entries scroll', id: 'transcript' }, all.map(entryItem));
      clear(left).append(h('h2', null, `Transcript (${all.length} entries, oldest first)`), all.length === 0 ? h('p', { class: 'muted' }, 'No entries.') : list, more);
      list.scrollTop = list.scrollHeight;
    };
    const loadContext = async () => {
      const dump = await api(base + '/context');
      clear(top).append(inspector(dump));
    };
    const reload = async () => { if (!gone) await Promise.all([loadInfo(), loadTranscript(), loadContext()]); };
    // Actions.
    const compact = h('button', { id: 'compact', type: 'button' }, 'Compact now');
    const del = h('button', { id: 'delete', type: 'button', class: 'danger' }, 'Delete…');
    const confirmBox = h('span', { class: 'confirm', id: 'confirm-delete', hidden: true },
      'Delete this session, its transcript and its unanswered messages?',
      h('button', { id: 'confirm-delete-yes', type: 'button', class: 'danger solid' }, 'Yes, delete'),
      h('button', { id: 'confirm-delete-no', type: 'button' }, 'Cancel'));
    actions.append(compact, del, confirmBox);
    compact.addEventListener('click', async () => {
      compact.disabled = true; notice('compacting…');
      try {
        const r = await api(base + '/compact', { method: 'POST' });
        notice(`Compacted: ${int(r.tokens_before)} → ${int(r.tokens_after)} history tokens.`, 'ok');
        await reload();
      } catch (e) { fail(e); } finally { compact.disabled = false; }
    });
    del.addEventListener('click', () => { confirmBox.hidden = false; del.disabled = true; });
    $('confirm-delete-no').addEventListener('click', () => { confirmBox.hidden = true; del.disabled = false; });
    $('confirm-delete-yes').addEventListener('click', async () => {
      try {
        const r = await api(base, { method: 'DELETE' });
        gone = true;
        stopStream();
        notice(`Deleted ${r.session_key}: ${int(r.entries)} entries, ${int(r.pending_messages)} unanswered messages.`, 'ok');
        clear(main).append(h('h1', null, key), h('p', { id: 'deleted' }, 'This session was deleted. ', h('a', { href: '/ui/sessions' }, 'Back to the sessions')));
      } catch (e) { fail(e); confirmBox.hidden = true; del.disabled = false; }
    });
    right.append(h('section', null, h('h2', null, 'Live replies'), h('p', { class: 'muted', id: 'live-state' }, 'connecting…'), live));
    // Live replies: fetch() streaming (EventSource cannot send the bearer header).
    let pending = null;
    const refreshSoon = () => { clearTimeout(pending); pending = setTimeout(() => reload().catch(fail), 300); };
    const onEvent = (name, data) => {
      let v;
      try { v = JSON.parse(data); } catch (_) { return; }
      const id = 'live-' + (v.in_reply_to || []).join(',');
      let li = Array.from(live.children).find((x) => x.dataset.replyTo === id);
      if (!li) {
        li = h('li', { 'data-reply-to': id, class: 'streaming' }, h('div', { class: 'meta' }, h('span', { class: 'who' }, 'assistant'), 'replying to ' + (v.in_reply_to || []).join(', ')), h('pre', { class: 'text' }));
        live.prepend(li);
        while (live.children.length > LIVE_MAX) live.removeChild(live.lastChild);
      }
      const text = li.querySelector('pre');
      if (name === 'delta') text.textContent += v.text || '';
      if (name === 'reply') { text.textContent = v.text || ''; li.classList.remove('streaming'); li.dataset.seq = String(v.seq); refreshSoon(); }
    };
    const ctl = { abort: null, stopped: false };
    const stopStream = () => { ctl.stopped = true; if (ctl.abort) ctl.abort.abort(); };
    const stream = async () => {
      while (!ctl.stopped) {
        ctl.abort = new AbortController();
        try {
          const r = await fetch('/v1/events?session_key=' + enc(key), { headers: headers({ accept: 'text/event-stream' }), cache: 'no-store', credentials: 'omit', signal: ctl.abort.signal });
          if (r.status === 401) { askForKey(''); return; }
          if (!r.ok || !r.body) throw new Error('events: HTTP ' + r.status);
          $('live-state').textContent = 'connected: new replies appear here as they are sent';
          await readSse(r.body, onEvent);
        } catch (e) {
          if (ctl.stopped) return;
        }
        if (ctl.stopped) return;
        const st = $('live-state');
        if (st) st.textContent = 'disconnected; retrying…';
        await new Promise((res) => setTimeout(res, STREAM_RETRY_MS));
      }
    };
    window.addEventListener('pagehide', stopStream);
    try {
      await reload();
    } catch (e) {
      if (e.status === 404) { clear(main).append(h('h1', null, key), h('p', { class: 'error', id: 'not-found' }, 'No such session.')); return; }
      throw e;
    }
    stream();
  }
  /** Reads a text/event-stream body, calling `on(event, data)` per event. Lines are bounded by
   * the server's own events; a line that never ends is cut at 1 MiB. */
  async function readSse(body, on) {
    const MAX_LINE = 1 << 20;
    const reader = body.getReader();
    const dec = new TextDecoder();
    let buf = ''; let ev = 'message'; let data = [];
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += dec.decode(value, { stream: true });
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, '');
        buf = buf.slice(nl + 1);
        if (line === '') { if (data.length) on(ev, data.join('\n')); ev = 'message'; data = []; continue; }
        if (line.startsWith(':')) continue;
        const i = line.indexOf(':');
        const field = i < 0 ? line : line.slice(0, i);
        const val = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
        if (field === 'event') ev = val; else if (field === 'data') data.push(val);
      }
      if (buf.length > MAX_LINE) buf = '';
    }
  }

  // ---- routing ----
  function route() {
    const p = location.pathname.replace(/\/+$/, '');
    if (p === '/ui' || p === '') return { page: 'overview' };
    if (p === '/ui/sessions') return { page: 'sessions' };
    const m = p.match(/^\/ui\/sessions\/([^/]+)$/);
    if (m) {
      try { return { page: 'session', key: decodeURIComponent(m[1]) }; } catch (_) { return { page: 'missing' }; }
    }
    return { page: 'missing' };
  }
  async function start() {
    const main = $('main');
    const r = route();
    $('nav-overview').classList.toggle('current', r.page === 'overview');
    $('nav-sessions').classList.toggle('current', r.page === 'sessions' || r.page === 'session');
    notice('');
    refreshFn = null;
    try {
      if (r.page === 'overview') await overview(main);
      else if (r.page === 'sessions') await sessionsPage(main);
      else if (r.page === 'session') await sessionPage(main, r.key);
      else clear(main).append(h('h1', null, 'Not found'), h('p', null, h('a', { href: '/ui' }, 'Overview')));
    } catch (e) { fail(e); }
  }
  document.addEventListener('DOMContentLoaded', () => { setupChrome(); start(); });
})();
