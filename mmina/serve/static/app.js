// mmina serve: the pages of the local web application (no build step, no network beyond this server).
'use strict';

const MODES = ['wandered', 'lingered', 'wrong_answer', 'out_of_budget', 'unparsable', 'action_error', 'error'];
const view = () => document.getElementById('view');
let current = null;       // the page shown: {refresh(), leave()}
let version = -1;         // the store's version this page last saw (see /api/changes)

// ---- small helpers --------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const element = document.createElement(tag);
  Object.entries(attrs || {}).forEach(([key, value]) => {
    if (value == null || value === false) return;
    if (key.startsWith('on')) element.addEventListener(key.slice(2), value);
    else if (key === 'className') element.className = value;
    else element.setAttribute(key, value === true ? '' : value);
  });
  children.flat().forEach(child => {
    if (child == null || child === false) return;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  });
  return element;
}

async function api(path, options) {
  const response = await fetch(path, options);
  let body = null;
  try { body = await response.json(); } catch (e) { body = null; }
  if (!response.ok) throw new Error((body && body.error) || `${response.status} ${response.statusText}`);
  return body;
}

function showError(error) {
  const box = document.getElementById('message');
  box.textContent = error instanceof Error ? error.message : String(error);
  box.hidden = false;
}

function clearError() { document.getElementById('message').hidden = true; }

function percent(value) { return value == null ? '–' : (100 * value).toFixed(1) + '%'; }
function rateCell(value, lo, hi) {
  return value == null ? '–' : `${percent(value)} [${Math.round(100 * lo)}%–${Math.round(100 * hi)}%]`;
}
function duration(seconds) {
  if (seconds == null) return '';
  const s = Math.round(seconds);
  return s >= 3600 ? `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`
    : s >= 60 ? `${Math.floor(s / 60)} min ${s % 60} s` : `${s} s`;
}
function verdictSpan(verdict) { return h('span', {className: verdict || 'unscored'}, verdict || 'unscored'); }
function query(params) {
  const search = new URLSearchParams();
  Object.entries(params).forEach(([key, value]) => {
    (Array.isArray(value) ? value : [value]).forEach(v => { if (v != null && v !== '') search.append(key, v); });
  });
  return search.toString();
}
function parseHash() {
  const [path, search] = location.hash.replace(/^#/, '').split('?');
  return {parts: (path || '/').split('/').filter(Boolean).map(decodeURIComponent), params: new URLSearchParams(search || '')};
}
function setHash(path, params, replace) {
  const text = '#' + path + (params && query(params) ? '?' + query(params) : '');
  if (replace) history.replaceState(null, '', text); else location.hash = text;
}
function select(name, options, chosen, onchange, attrs) {
  return h('select', {name, onchange, ...(attrs || {})}, options.map(([value, label]) =>
    h('option', {value, selected: (Array.isArray(chosen) ? chosen.includes(value) : chosen === value) || null}, label)));
}
function chosenValues(selectElement) { return [...selectElement.selectedOptions].map(o => o.value); }
function tableOf(columns, rows, attrs) {
  return h('table', attrs || {}, h('thead', {}, h('tr', {}, columns.map(c => h('th', {}, c)))),
    h('tbody', {}, rows.map(row => h('tr', {}, row.map(cell => h('td', {}, cell))))));
}
let runsCache = null;
async function runList() {
  if (!runsCache) runsCache = (await api('/api/runs')).runs;
  return runsCache;
}
async function evaluatorList() { return (await api('/api/evaluators')).evaluators; }

// ---- live updates ---------------------------------------------------------------------------

async function followChanges() {
  for (;;) {
    try {
      const state = await api(`/api/changes?since=${version}`);
      const status = document.getElementById('status');
      status.textContent = state.problem ? `store: ${state.problem}`
        : state.runs_indexed < state.runs_total ? `indexing ${state.runs_indexed} of ${state.runs_total} runs…` : '';
      if (state.version !== version) {
        const first = version === -1;
        version = state.version;
        runsCache = null;
        if (!first && current && current.refresh) await current.refresh();
      }
    } catch (error) {
      await new Promise(resolve => setTimeout(resolve, 2000));
    }
  }
}

// ---- runs -----------------------------------------------------------------------------------

function runsPage() {
  const root = h('div', {});
  const picked = new Set();
  async function refresh() {
    const data = await api('/api/runs');
    runsCache = data.runs;
    root.replaceChildren(h('h1', {}, 'Runs'), runsToolbar(picked),
      data.runs.length ? runsTable(data, picked) : h('p', {className: 'muted'}, 'No runs in this store yet: record one with mmina record.'),
      h('p', {className: 'muted'}, `Task SR and hop SR: the ${data.evaluator} verdicts, 95% Wilson intervals. `
        + 'A run being recorded updates as its episodes are committed.'));
  }
  return {node: root, refresh};
}

function runsToolbar(picked) {
  const go = (path) => () => {
    if (!picked.size) { showError('pick one or more runs first (the boxes on the left)'); return; }
    const runs = [...picked];
    if (path === '/compare') setHash('/compare', {a: runs[0], b: runs[1] || runs[0]});
    else setHash(path, {run: runs});
  };
  return h('div', {className: 'controls'},
    h('button', {onclick: go('/episodes'), id: 'runs-episodes'}, 'Episodes of the picked runs'),
    h('button', {onclick: go('/analysis'), id: 'runs-analysis'}, 'Analysis of the picked runs'),
    h('button', {onclick: go('/compare'), id: 'runs-compare'}, 'Side by side (two runs)'));
}

function runsTable(data, picked) {
  const head = ['', 'run', 'agent', 'model', 'started', 'progress', 'task SR [95% CI]', 'hop SR [95% CI]',
    'errors', 'unscored', 'cost', ''];
  const rows = data.runs.map(run => {
    const rates = run.rates || {};
    const total = run.task_count || 0;
    const share = total ? Math.min(1, run.tasks_done / total) : 0;
    const progress = h('span', {}, h('span', {className: 'progress'}, h('span', {style: `width:${(100 * share).toFixed(1)}%`})),
      ` ${run.tasks_done} / ${total}`, run.live ? h('span', {className: 'badge live'}, 'recording') : null,
      run.eta_s != null ? h('span', {className: 'muted'}, ` ETA ${duration(run.eta_s)}`) : null);
    const box = h('input', {type: 'checkbox', checked: picked.has(run.run_id) || null,
      onchange: e => { if (e.target.checked) picked.add(run.run_id); else picked.delete(run.run_id); }});
    const mode = run.mode === 'replay' ? h('span', {className: 'badge'}, `replay of ${run.source_run}`) : null;
    return h('tr', {'data-run': run.run_id},
      h('td', {}, box), h('td', {}, run.run_id, mode), h('td', {}, run.agent), h('td', {}, run.model || ''),
      h('td', {}, (run.created_at || '').replace('T', ' ').slice(0, 19)), h('td', {className: 'progress-cell'}, progress),
      h('td', {className: 'task-sr'}, run.rates ? rateCell(rates.task_sr, rates.task_sr_lo, rates.task_sr_hi) : 'indexing…'),
      h('td', {className: 'hop-sr'}, run.rates ? rateCell(rates.hop_sr, rates.hop_sr_lo, rates.hop_sr_hi) : ''),
      h('td', {className: 'num'}, rates.errors ?? ''), h('td', {className: 'num'}, rates.unscored ?? ''),
      h('td', {className: 'num'}, rates.cost_usd != null ? '$' + rates.cost_usd.toFixed(4) : ''),
      h('td', {}, h('a', {href: '#/episodes?' + query({run: run.run_id})}, 'episodes'), ' · ',
        h('a', {href: '#/analysis?' + query({run: run.run_id})}, 'analysis'),
        run.problem ? h('div', {className: 'error'}, run.problem) : null));
  });
  return h('table', {id: 'runs'}, h('thead', {}, h('tr', {}, head.map(c => h('th', {}, c)))), h('tbody', {}, rows));
}

// ---- analysis -------------------------------------------------------------------------------

let plotlyLoading = null;
function loadPlotly() {
  plotlyLoading = plotlyLoading || new Promise((resolve, reject) => {
    document.head.append(h('script', {src: '/static/plotly.min.js', onload: resolve, onerror: reject}));
  });
  return plotlyLoading;
}

async function pickers(params, multiple) {
  const [runs, evaluators] = await Promise.all([runList(), evaluatorList()]);
  const chosenRuns = params.getAll('run');
  const runSelect = select('run', runs.map(r => [r.run_id, r.run_id]), chosenRuns, null,
    multiple ? {multiple: true, size: Math.min(6, Math.max(2, runs.length)), id: 'pick-runs'} : {id: 'pick-runs'});
  const evaluator = params.get('evaluator') || evaluators[0];
  const evaluatorSelect = select('evaluator', evaluators.map(e => [e, e]), evaluator, null, {id: 'pick-evaluator'});
  return {runs, runSelect, evaluatorSelect};
}

function analysisPage(params) {
  const root = h('div', {});
  async function render() {
    const {runs, runSelect, evaluatorSelect} = await pickers(params, true);
    const show = () => setHash('/analysis', {run: chosenValues(runSelect), evaluator: evaluatorSelect.value});
    const chosen = params.getAll('run');
    root.replaceChildren(h('h1', {}, 'Analysis'), h('div', {className: 'controls'},
      h('label', {}, 'runs', runSelect), h('label', {}, 'evaluator', evaluatorSelect),
      h('button', {onclick: show, id: 'show-analysis'}, 'Show')));
    if (!chosen.length) {
      root.append(h('p', {className: 'muted'}, runs.length ? 'Pick runs and an evaluator.' : 'No runs yet.'));
      return;
    }
    const body = h('div', {id: 'analysis'}, h('p', {className: 'muted'}, 'Computing the report…'));
    root.append(body);
    const data = await api('/api/analysis?' + query({run: chosen, evaluator: evaluatorSelect.value}));
    body.replaceChildren(...analysisSections(data));
    await loadPlotly();
    Object.values(data.charts).flat().forEach(chart => {
      const target = document.getElementById(chart.id);
      if (target) window.Plotly.newPlot(target, chart.figure.data, chart.figure.layout, {displaylogo: false, responsive: true});
    });
  }
  return {node: root, refresh: null, render};
}

function analysisSections(data) {
  const table = name => {
    const t = data.tables[name];
    return [h('h3', {}, t.title), h('div', {className: 'scroll'}, tableOf(t.columns, t.rows, {'data-table': name}))];
  };
  const parts = [h('p', {}, `Runs: ${data.runs.join(', ')}; evaluator ${data.evaluator}; ${data.tasks} task(s). `
    + 'The tables and charts of mmina report, rates with their 95% Wilson interval.')];
  data.sections.forEach(section => {
    parts.push(h('section', {id: section.id}, h('h2', {}, section.title), ...table(section.table),
      ...(data.charts[section.table] || []).map(chart => h('div', {id: chart.id, className: 'chart'})),
      ...(section.table === 'failure_modes' ? table('episode_failures') : [])));
  });
  return parts;
}

// ---- episodes -------------------------------------------------------------------------------

const COLUMNS = [['task_id', 'task'], ['run_id', 'run'], ['attempt', 'try'], ['n_hops', 'hops'], ['bucket', 'bucket'],
  ['verdict', 'verdict'], ['hops_passed', 'hops passed'], ['first_failure', 'first failure'], ['modes', 'failure modes'],
  ['status', 'status'], ['stop_reason', 'stop'], ['n_steps', 'steps'], ['final_answer', 'answer'], ['error', 'error'],
  ['cost_usd', 'cost']];
const FILTER_NAMES = ['bucket', 'n_hops', 'first_failure', 'mode', 'site', 'verdict', 'status', 'error', 'answer', 'task'];
const PAGE = 50;

function episodesPage(params) {
  const root = h('div', {});
  const state = Object.fromEntries([...params.entries()].filter(([k]) => k !== 'run'));
  const runs = params.getAll('run');
  const table = h('div', {id: 'episodes-table'});
  const go = (changes, replace) => setHash('/episodes', {run: runs, ...state, ...changes, offset: changes.offset || null}, replace);

  async function render() {
    const {runSelect, evaluatorSelect} = await pickers(params, true);
    runSelect.addEventListener('change', () => setHash('/episodes', {...state, run: chosenValues(runSelect), offset: null}));
    evaluatorSelect.addEventListener('change', () => go({evaluator: evaluatorSelect.value}));
    const facets = (await api('/api/facets?' + query({run: runs, evaluator: evaluatorSelect.value}))).facets;
    root.replaceChildren(h('h1', {}, 'Episodes'), h('div', {className: 'controls', id: 'episode-filters'},
      h('label', {}, 'runs (none picked: all)', runSelect), h('label', {}, 'evaluator', evaluatorSelect),
      ...FILTER_NAMES.map(name => filterControl(name, facets, state, go))), table);
    await refresh();
  }

  async function refresh() {
    const data = await api('/api/episodes?' + query({run: runs, ...state, limit: PAGE}));
    const offset = data.offset;
    const note = data.runs_indexed < data.runs_total ? ` (indexing: ${data.runs_indexed} of ${data.runs_total} runs so far)` : '';
    table.replaceChildren(
      h('div', {className: 'pager'},
        h('button', {id: 'prev-page', disabled: offset <= 0 || null, onclick: () => go({offset: Math.max(0, offset - PAGE)})}, '← previous'),
        h('span', {id: 'episode-count'}, data.total ? `episodes ${offset + 1}–${offset + data.rows.length} of ${data.total}${note}` : `no episode matches${note}`),
        h('button', {id: 'next-page', disabled: offset + PAGE >= data.total || null, onclick: () => go({offset: offset + PAGE})}, 'next →')),
      episodesTable(data.rows, state, go));
  }
  return {node: root, refresh, render};
}

function filterControl(name, facets, state, go) {
  const labels = {n_hops: 'hops', first_failure: 'first failed hop', mode: 'failure mode', error: 'error text',
    answer: 'answer text', task: 'task id'};
  const label = labels[name] || name;
  if (['error', 'answer', 'task'].includes(name)) {
    const input = h('input', {type: 'text', name, value: state[name] || '', placeholder: 'contains…',
      onchange: e => go({[name]: e.target.value})});
    return h('label', {}, label, input);
  }
  const known = (facets[name] || []).map(([value, n]) => [value, `${value} (${n})`]);
  if (name === 'mode') MODES.forEach(m => { if (!known.some(([v]) => v === m)) known.push([m, `${m} (0)`]); });
  return h('label', {}, label, select(name, [['', 'any'], ...known], state[name] || '', e => go({[name]: e.target.value})));
}

function episodesTable(rows, state, go) {
  const sort = state.sort || 'run_id';
  const desc = state.order === 'desc';
  const head = COLUMNS.map(([key, label]) => h('th', {
    className: 'sortable' + (sort === key ? ' sorted' + (desc ? ' desc' : '') : ''), 'data-sort': key,
    onclick: () => go({sort: key, order: sort === key && !desc ? 'desc' : 'asc'})}, label));
  const body = rows.map(row => h('tr', {className: 'clickable', 'data-episode': row.episode_id,
    onclick: () => setHash('/episode/' + encodeURIComponent(row.episode_id), {})},
  COLUMNS.map(([key]) => h('td', {}, cellOf(row, key)))));
  return h('table', {id: 'episodes'}, h('thead', {}, h('tr', {}, head)), h('tbody', {}, body));
}

function cellOf(row, key) {
  if (key === 'verdict') return verdictSpan(row.verdict);
  if (key === 'hops_passed') return row.hops_total == null ? '' : `${row.hops_passed}/${row.hops_total}`;
  if (key === 'modes') return (row.modes || []).join(', ');
  if (key === 'task_id') return h('a', {href: '#/episode/' + encodeURIComponent(row.episode_id)}, row.task_id);
  if (key === 'cost_usd') return row.cost_usd ? '$' + row.cost_usd.toFixed(4) : '';
  if (key === 'attempt') return row.counted ? String(row.attempt) : `${row.attempt} (not counted)`;
  const value = row[key];
  return value == null ? '' : String(value).slice(0, 160);
}

// ---- one episode ----------------------------------------------------------------------------

function episodePage(id, params) {
  const root = h('div', {className: params.has('queue') ? 'blind' : ''});   // labelling: verdicts hidden (v shows them)
  let episode = null;
  let panel = null;
  let step = Math.max(0, Number(params.get('step') || 0) || 0);
  let marks = true;

  function onKey(event) {
    if (event.target.closest('input, textarea, select')) return;
    if (panel && panel.key(event)) return;
    if (event.key === 'ArrowRight' || event.key === 'j') move(1);
    if (event.key === 'ArrowLeft' || event.key === 'k') move(-1);
  }
  function move(delta) {
    if (!episode) return;
    const next = Math.min(episode.steps.length - 1, Math.max(0, step + delta));
    if (next !== step) { step = next; show(); }
  }
  async function render() {
    episode = await api('/api/episodes/' + encodeURIComponent(id));
    step = Math.min(step, Math.max(0, episode.steps.length - 1));
    panel = await labelPanel(episode, params, root);
    document.addEventListener('keydown', onKey);
    show();
  }
  function show() {
    setHash('/episode/' + encodeURIComponent(id), {step: step || null, queue: params.get('queue')}, true);
    root.replaceChildren(episodeHeader(episode), panel ? panel.node : '', stepper(episode, step, move),
      stepView(episode, episode.steps[step], marks, () => { marks = !marks; show(); }));
    const next = episode.steps[step + 1];
    if (next && next.shot) new Image().src = next.shot;   // the next step shows at once
  }
  return {node: root, refresh: null, render, leave: () => document.removeEventListener('keydown', onKey)};
}

function episodeHeader(e) {
  const summary = e.summary || {};
  return h('div', {},
    h('h1', {id: 'episode-title'}, `${e.task_id} (${e.run_id})`),
    h('p', {id: 'episode-intent'}, e.intent || ''),
    h('div', {className: 'kv'},
      h('b', {}, 'episode'), h('span', {}, e.episode_id),
      h('b', {}, 'status'), h('span', {}, `${e.status}, stop: ${e.stop_reason}` + (e.error ? `, error: ${e.error}` : '')),
      h('b', {}, 'answer'), h('span', {}, e.final_answer ?? '(none)'),
      h('b', {className: 'verdict-info'}, 'verdict'), h('span', {className: 'verdict-info'}, verdictSpan(summary.verdict),
        summary.hops_total != null ? ` — hops ${summary.hops_passed}/${summary.hops_total}, first failure: ${summary.first_failure}` : '',
        (summary.modes || []).length ? `, failure modes: ${summary.modes.join(', ')}` : ''),
      h('b', {className: 'verdict-info'}, 'verdicts'), h('span', {id: 'episode-verdicts', className: 'verdict-info'}, verdictLines(e.verdicts)),
      h('b', {className: 'blind-note'}, 'verdicts'), h('span', {className: 'blind-note muted'}, 'hidden while labelling (v shows them)')));
}

function verdictLines(verdicts) {
  if (!verdicts.length) return 'not scored yet (mmina rescore)';
  const byEvaluator = {};
  verdicts.forEach(v => { (byEvaluator[v.evaluator] = byEvaluator[v.evaluator] || []).push(v); });
  return Object.entries(byEvaluator).map(([name, rows]) => h('div', {}, name + ': ' + rows.map(v =>
    (v.level === 'hop' ? 'hop ' + v.hop : v.level) + ' ' + v.verdict).join(', ')));
}

function stepper(e, step, move) {
  return h('div', {className: 'stepper'},
    h('button', {id: 'prev-step', disabled: step <= 0 || null, onclick: () => move(-1)}, '← previous'),
    h('span', {id: 'step-label'}, `step ${e.steps.length ? step + 1 : 0} of ${e.steps.length}`),
    h('button', {id: 'next-step', disabled: step >= e.steps.length - 1 || null, onclick: () => move(1)}, 'next →'),
    h('span', {className: 'muted'}, '← → or j k step through; the address links to this step'));
}

function stepView(e, s, marks, toggle) {
  if (!s) return h('p', {className: 'muted'}, 'This episode has no steps.');
  const image = marks ? s.shot : s.screenshot;
  const box = s.box && image ? h('div', {id: 'step-box', className: 'box', title: 'the element the action targeted',
    style: ['left', 'top', 'width', 'height'].map(k => `${k}:${100 * s.box[k]}%`).join(';')}) : null;
  const picture = image ? h('div', {className: 'shot'}, h('img', {id: 'step-shot', src: image, alt: 'screenshot of the step'}), box)
    : h('p', {id: 'no-shot', className: 'muted'}, 'no screenshot');
  return h('div', {className: 'viewer'},
    h('div', {}, s.shot && s.screenshot ? h('label', {}, h('input', {type: 'checkbox', id: 'marks-toggle', checked: marks || null, onchange: toggle}),
      ' set-of-marks (ids painted on the elements)') : null, picture),
    h('div', {},
      h('div', {className: 'kv'},
        h('b', {}, 'URL'), h('span', {id: 'step-url'}, s.url),
        h('b', {}, 'action'), h('span', {}, h('code', {id: 'step-action'}, s.action || '(unparsable output)'),
          s.error ? h('span', {id: 'step-error', className: 'error'}, ' ' + s.error) : null),
        h('b', {}, 'target'), h('code', {id: 'step-target', className: s.target ? 'target' : ''}, s.target || '')),
      h('h3', {}, 'Hop progress'), hopProgress(e, s),
      h('details', {id: 'step-input-box'}, h('summary', {}, h('b', {}, 'Model input')),
        h('pre', {id: 'step-input'}, s.input || 'no model was asked at this step')),
      h('h3', {}, 'Model output'), h('pre', {id: 'step-output'}, s.output),
      h('h3', {}, `Network: ${s.requests.length} request(s) issued by this step's action`), requestTable(s.requests),
      h('details', {}, h('summary', {}, h('b', {}, 'Accessibility tree')), h('pre', {id: 'step-tree'}, s.tree))));
}

function hopProgress(e, s) {
  return h('div', {className: 'hops', id: 'step-hops'}, (e.procedure || []).filter(k => k !== 'end').map((keyword, i) =>
    h('span', {className: s.live_hops != null && i < s.live_hops ? 'done' : i === s.live_hops ? 'head' : ''}, `${i + 1}. ${keyword}`)));
}

function requestTable(requests) {
  if (!requests.length) return h('p', {className: 'muted'}, 'none');
  const replayed = requests.some(r => r.replay_match);
  const columns = ['method', 'status', 'URL', 'type', 'size', 'ms', 'body', ...(replayed ? ['answered by'] : [])];
  return h('div', {className: 'scroll'}, h('table', {className: 'requests', id: 'step-requests'},
    h('thead', {}, h('tr', {}, columns.map(c => h('th', {}, c)))),
    h('tbody', {}, requests.map(r => h('tr', {},
      h('td', {}, r.method), h('td', {className: r.status >= 400 || r.status === 0 ? 'error' : ''}, r.status),
      h('td', {className: 'url'}, r.url), h('td', {}, r.mime_type || ''), h('td', {className: 'num'}, r.response_body_size ?? ''),
      h('td', {className: 'num'}, r.time_ms != null ? Math.round(r.time_ms) : ''),
      h('td', {}, r.response_body ? h('a', {href: r.response_body + '&view=text', target: '_blank', rel: 'noopener'}, 'view') : ''),
      ...(replayed ? [replayMatch(r)] : []))))));
}

function replayMatch(r) {
  // how a replay answered the request: the match kind, and the recorded request that served it
  const gap = r.replay_match === 'unmatched' || r.replay_match === 'failed' || r.replay_match === 'nearest';
  const source = r.replay_source_episode == null ? '' : ' ← ' + r.replay_source_episode + ' #' + r.replay_source_seq;
  return h('td', {className: gap ? 'error match' : 'match'}, r.replay_match ? r.replay_match + source : '');
}

// ---- side by side ---------------------------------------------------------------------------

function comparePage(params) {
  const root = h('div', {});
  async function render() {
    const [runs, evaluators] = await Promise.all([runList(), evaluatorList()]);
    const pick = (name, chosen, options) => select(name, options.map(v => [v, v]), chosen, null, {id: 'pick-' + name});
    const runIds = runs.map(r => r.run_id);
    const a = pick('a', params.get('a') || runIds[0], runIds), b = pick('b', params.get('b') || runIds[1] || runIds[0], runIds);
    const ea = pick('ea', params.get('ea') || evaluators[0], evaluators), eb = pick('eb', params.get('eb') || evaluators[0], evaluators);
    const show = () => setHash('/compare', {a: a.value, b: b.value, ea: ea.value, eb: eb.value});
    root.replaceChildren(h('h1', {}, 'Side by side'), h('div', {className: 'controls'},
      h('label', {}, 'run A', a), h('label', {}, 'evaluator A', ea), h('label', {}, 'run B', b), h('label', {}, 'evaluator B', eb),
      h('button', {id: 'show-compare', onclick: show}, 'Compare')),
    h('p', {className: 'muted'}, 'Two runs (two models, a run and its replay), or one run under two evaluators (a run and a rescore), paired by task.'));
    if (!params.get('a')) return;
    const sides = {a: params.get('a'), b: params.get('b') || params.get('a'), ea: params.get('ea'), eb: params.get('eb')};
    const data = await api('/api/compare?' + query(sides));
    root.append(compareSummary(data, sides));
    const task = params.get('task');
    const pair = task && data.pairs.find(p => p.task_id === task);
    if (pair) root.append(await stepsSideBySide(pair, sides.ea));
  }
  return {node: root, refresh: null, render};
}

function compareSummary(data, sides) {
  const rows = data.pairs.map(p => h('tr', {className: 'clickable' + (p.passed_a !== p.passed_b ? ' flip' : ''), 'data-task': p.task_id,
    onclick: () => setHash('/compare', {...sides, task: p.task_id})},
  h('td', {}, p.task_id), h('td', {}, verdictSpan(p.passed_a ? 'pass' : 'fail')), h('td', {}, p.hops_a),
  h('td', {}, verdictSpan(p.passed_b ? 'pass' : 'fail')), h('td', {}, p.hops_b),
  h('td', {}, p.passed_a === p.passed_b ? '' : (p.passed_a ? 'pass→fail' : 'fail→pass'))));
  return h('div', {id: 'comparison'},
    h('h3', {}, data.summary.title), tableOf(data.summary.columns, data.summary.rows),
    h('p', {}, `both passed ${data.both_passed}, both failed ${data.both_failed}, pass→fail ${data.pass_to_fail}, `
      + `fail→pass ${data.fail_to_pass}; McNemar exact p = ${Number(data.mcnemar_p).toPrecision(4)}`),
    h('h3', {}, 'Tasks (pick one to see both episodes step by step)'),
    h('table', {id: 'pairs'}, h('thead', {}, h('tr', {}, ['task', 'A', 'hops A', 'B', 'hops B', 'flip'].map(c => h('th', {}, c)))),
      h('tbody', {}, rows)));
}

async function stepsSideBySide(pair, evaluator) {
  const data = await api('/api/compare/steps?' + query({a: pair.episode_a, b: pair.episode_b, evaluator}));
  const cell = (side, s, same) => s ? h('div', {className: 'side'},
    h('div', {className: same.url ? '' : 'differs'}, h('b', {}, 'URL '), s.url),
    h('div', {className: same.action ? '' : 'differs'}, h('b', {}, 'action '), h('code', {}, s.action || '(unparsable output)'),
      s.error ? h('span', {className: 'error'}, ' ' + s.error) : null),
    s.shot ? h('a', {href: `#/episode/${encodeURIComponent(side.episode_id)}?step=${s.index}`},
      h('img', {src: s.shot, loading: 'lazy', alt: 'screenshot'})) : null) : h('div', {className: 'side muted'}, '(no step)');
  const rows = data.pairs.map(p => h('div', {className: 'pair' + (p.index === data.diverges_at ? ' diverges' : ''), 'data-step': p.index},
    h('div', {}, h('b', {}, `step ${p.index + 1}`), p.index === data.diverges_at ? h('div', {className: 'badge'}, 'diverges') : null),
    cell(data.a, data.a.steps[p.index], {url: p.same_url, action: p.same_action}),
    cell(data.b, data.b.steps[p.index], {url: p.same_url, action: p.same_action})));
  const where = data.diverges_at == null ? 'The two episodes take the same steps.'
    : `They part at step ${data.diverges_at + 1} (URL or action differs; highlighted).`;
  return h('div', {id: 'side-by-side'}, h('h2', {}, `${pair.task_id}: ${data.a.episode_id} | ${data.b.episode_id}`),
    h('p', {id: 'divergence'}, where),
    h('div', {className: 'pair'}, h('b', {}, ''), h('b', {}, `A: ${data.a.run_id} — ${data.a.status}, answer: ${data.a.final_answer ?? '(none)'}`),
      h('b', {}, `B: ${data.b.run_id} — ${data.b.status}, answer: ${data.b.final_answer ?? '(none)'}`)), rows);
}

// ---- SQL ------------------------------------------------------------------------------------

function sqlPage(params) {
  const root = h('div', {});
  const text = h('textarea', {id: 'sql-query', spellcheck: 'false'}, params.get('q') || 'select run_id, count(*) as episodes from episodes group by run_id');
  const result = h('div', {id: 'sql-result'});
  const body = () => JSON.stringify({query: text.value});
  async function run() {
    clearError();
    setHash('/sql', {q: text.value}, true);
    result.replaceChildren(h('p', {className: 'muted'}, 'Running…'));
    try {
      const data = await api('/api/sql', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: body()});
      result.replaceChildren(h('p', {id: 'sql-count'}, data.truncated
        ? `the first ${data.rows.length} rows shown (there are more; the CSV has all)` : `${data.total} row(s)`),
      h('div', {className: 'scroll'}, tableOf(data.columns, data.rows.map(r => r.map(v => v == null ? '' : typeof v === 'object' ? JSON.stringify(v) : String(v))), {id: 'sql-table'})));
    } catch (error) { result.replaceChildren(); showError(error); }
  }
  async function download() {
    clearError();
    const response = await fetch('/api/sql.csv', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: body()});
    if (!response.ok) { showError((await response.json()).error); return; }
    const link = h('a', {href: URL.createObjectURL(await response.blob()), download: 'mmina-query.csv'});
    document.body.append(link); link.click(); link.remove();
  }
  text.addEventListener('keydown', e => { if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) run(); });
  root.append(h('h1', {}, 'SQL'), h('p', {className: 'muted'}, 'Read-only DuckDB SQL over the store\'s views (runs, tasks, episodes, steps, requests, scores, blobs, episode_scores, latest_scores, …), as mmina sql runs it. Ctrl+Enter runs.'),
    text, h('div', {className: 'controls'}, h('button', {id: 'sql-run', onclick: run}, 'Run'), h('button', {id: 'sql-csv', onclick: download}, 'Download CSV')), result);
  return {node: root, refresh: null, render: () => (params.get('q') ? run() : null)};
}

// ---- routing --------------------------------------------------------------------------------

const PAGES = {'': runsPage, analysis: analysisPage, episodes: episodesPage, compare: comparePage, sql: sqlPage,
  label: labelPage};

async function route() {
  if (current && current.leave) current.leave();
  clearError();
  const {parts, params} = parseHash();
  const [name, ...rest] = parts;
  document.querySelectorAll('header nav a').forEach(a => a.classList.toggle('active', a.dataset.view === (name || 'runs')));
  let page;
  if (name === 'episode' && rest.length) page = episodePage(rest.join('/'), params);
  else if (PAGES[name || ''] && !rest.length) page = PAGES[name || ''](params);
  else page = {node: h('p', {}, 'No such page. '), refresh: null};
  current = page;
  view().replaceChildren(page.node);
  try {
    if (page.render) await page.render(); else if (page.refresh) await page.refresh();
  } catch (error) { if (current === page) showError(error); }
}

window.addEventListener('hashchange', route);   // an episode's own step changes use replaceState: no event
window.addEventListener('DOMContentLoaded', () => { route(); followChanges(); });
