// mmina serve: labelling — a person marks each hop and the task pass / fail / unsure / blocked, with the keyboard.
// Loaded before app.js (whose page table names labelPage); uses its helpers (h, api, query, setHash, ...) when called.
'use strict';

const LABELS = ['pass', 'fail', 'unsure', 'blocked'];
const LABEL_KEYS = {p: 'pass', f: 'fail', u: 'unsure', b: 'blocked'};
const LABELLER_KEY = 'mmina-labeller';
let labelConfig = null;

async function labellingConfig() {
  if (!labelConfig) labelConfig = await api('/api/labels/config');
  return labelConfig;
}
function labellerName() { return localStorage.getItem(LABELLER_KEY) || labelConfig.labeller; }
function queueAddress(queue, extra) { return '/api/labels/queue?' + [queueOf(queue), query(extra)].filter(Boolean).join('&'); }
function queueOf(queue) { return queue === 'all' ? '' : queue; }   // 'all': every episode of the store

// ---- the label page: which episodes to label, and who labels -------------------------------

function labelPage(params) {
  const root = h('div', {});
  async function render() {
    const config = await labellingConfig();
    const [runs, evaluators] = await Promise.all([runList(), evaluatorList()]);
    const runSelect = select('run', runs.map(r => [r.run_id, r.run_id]), params.getAll('run'), null,
      {multiple: true, size: Math.min(6, Math.max(2, runs.length)), id: 'label-runs'});
    const bucket = select('bucket', [['', 'any'], ['1', '1'], ['2-4', '2-4'], ['5+', '5+']], params.get('bucket') || '', null, {id: 'label-bucket'});
    const [a, b] = params.getAll('disagree');
    const pick = (id, chosen) => select(id, [['', '—'], ...evaluators.map(e => [e, e])], chosen || '', null, {id});
    const first = pick('label-a', a), second = pick('label-b', b);
    const name = h('input', {type: 'text', id: 'labeller', value: labellerName(), maxlength: 80});
    const counts = h('p', {id: 'label-counts', className: 'muted'}, '…');
    const queue = () => query({run: chosenValues(runSelect), bucket: bucket.value,
      disagree: first.value && second.value ? [first.value, second.value] : []});
    let asked = 0;   // answers can arrive out of order: only the latest question's is shown
    async function count() {
      const mine = ++asked;
      const found = await api(queueAddress(queue(), {labeller: labellerName()}));
      if (mine === asked) {
        counts.textContent = `${found.left} of ${found.total} episode(s) left to label as ${found.labeller} (${found.labelled} labelled).`;
      }
      return found;
    }
    async function start() {
      const found = await count();
      if (found.next) setHash('/episode/' + encodeURIComponent(found.next), {queue: queue() || 'all'});
      else showError('every episode of this queue is labelled: pick other runs, or another bucket');
    }
    [runSelect, bucket, first, second].forEach(control => control.addEventListener('change', () => count().catch(showError)));
    name.addEventListener('change', () => {
      if (name.value.trim()) localStorage.setItem(LABELLER_KEY, name.value.trim()); else localStorage.removeItem(LABELLER_KEY);
      name.value = labellerName();
      count().catch(showError);
    });
    root.replaceChildren(h('h1', {}, 'Label episodes'),
      config.writable ? null : h('p', {className: 'error'}, 'This server is read-only (--read-only): labels cannot be saved.'),
      params.get('done') ? h('p', {id: 'label-done', className: 'pass'}, 'Queue done: every episode of it is labelled.') : null,
      h('div', {className: 'controls'}, h('label', {}, 'runs (none picked: all)', runSelect), h('label', {}, 'hop bucket', bucket),
        h('label', {}, 'only where these two disagree', h('span', {}, first, ' ', second)), h('label', {}, 'labeller', name),
        h('button', {id: 'label-start', onclick: start, disabled: !config.writable || null}, 'Start labelling')),
      counts, labelHelp(),
      h('p', {className: 'muted'}, 'Verdicts of the evaluators stay hidden while you label (v shows them), so that they do not '
        + 'sway you. Labels are saved as verdicts of the human evaluator under your name; mmina agreement compares a judge with them.'));
    await count();
  }
  return {node: root, refresh: null, render};
}

function labelHelp() {
  return h('p', {className: 'keys'}, ...[['p f u b', 'pass, fail, unsure, blocked by the environment (selected item, then the next)'], ['P F U B', 'every item'],
    ['↑ ↓ 1–9 t', 'select'], ['n', 'note'], ['Enter', 'save, next unlabelled episode'], ['s', 'skip'], ['v', 'verdicts'],
    ['← →', 'steps']].map(([keys, what]) => h('span', {}, h('kbd', {}, keys), ` ${what}  `)));
}

// ---- the panel on an episode's page -----------------------------------------------------------

async function labelPanel(episode, params, root) {
  const config = await labellingConfig();
  if (!config.writable) return null;
  const labeller = labellerName();
  const queue = params.get('queue') ?? query({run: episode.run_id});
  const current = await api(`/api/episodes/${encodeURIComponent(episode.episode_id)}/labels?` + query({labeller}));
  const items = [...Array(current.n_hops).keys()].map(i => i + 1).concat([null]);
  const chosen = new Map(items.map(hop => [hop, null]));
  current.labels.forEach(l => chosen.set(l.hop, l.label));
  let focus = Math.max(0, items.findIndex(hop => !chosen.get(hop)));
  let busy = false;
  const note = h('input', {type: 'text', id: 'label-note', maxlength: config.max_note, value: current.note, placeholder: 'note (n)'});
  const status = h('span', {id: 'label-status', className: 'muted'},
    current.labels.length ? `labelled by ${labeller}` : `not labelled by ${labeller} yet`);
  const table = h('div', {id: 'label-panel'});
  const others = current.labellers.filter(n => n !== labeller).join(', ');
  const node = h('section', {className: 'labelling'}, h('b', {}, `Label as ${labeller}`),
    others ? h('span', {className: 'muted'}, ` (also labelled by ${others})`) : null, table,
  h('div', {className: 'controls'}, note,
    h('button', {id: 'label-save', onclick: () => saveAndNext()}, 'Save and next (Enter)'),
    h('button', {id: 'label-skip', onclick: () => goNext()}, 'Skip (s)'), status), labelHelp());

  function itemName(hop) {
    const site = hop != null ? (episode.procedure || [])[hop - 1] : null;
    return hop == null ? 'task' : `hop ${hop}` + (site ? ` (${site})` : '');
  }
  function draw() {
    table.replaceChildren(...items.map((hop, index) => h('div', {'data-item': hop == null ? 'task' : `hop-${hop}`,
      className: 'item' + (index === focus ? ' selected' : ''), onclick: () => { focus = index; draw(); }},
    h('span', {className: 'name'}, itemName(hop)),
    LABELS.map(label => h('button', {'data-label': label, className: chosen.get(hop) === label ? `chosen ${label}` : '',
      onclick: event => { event.stopPropagation(); mark(index, label); }}, label)))));
  }
  function mark(index, label) {
    chosen.set(items[index], label);
    focus = Math.min(items.length - 1, index + 1);
    status.textContent = 'not saved';
    draw();
  }
  function markAll(label) { items.forEach(hop => chosen.set(hop, label)); status.textContent = 'not saved'; draw(); }
  async function saveAndNext() {
    if (busy) return;
    const labels = items.filter(hop => chosen.get(hop)).map(hop => ({hop, label: chosen.get(hop)}));
    if (!labels.length) { showError('label the task or a hop first (p, f or u)'); return; }
    busy = true;
    status.textContent = 'saving…';
    try {
      await api('/api/labels', {method: 'POST', headers: {'Content-Type': 'application/json'},
        body: JSON.stringify({episode_id: episode.episode_id, labeller, note: note.value, labels})});
      status.textContent = 'saved';
      await goNext();
    } catch (error) { status.textContent = 'not saved'; showError(error); } finally { busy = false; }
  }
  async function goNext() {
    const found = await api(queueAddress(queue, {labeller, after: episode.episode_id}));
    if (found.next) setHash('/episode/' + encodeURIComponent(found.next), {queue});
    else location.hash = '#/label?' + [queueOf(queue), 'done=1'].filter(Boolean).join('&');
  }
  function key(event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return false;
    const lower = event.key.toLowerCase();
    if (LABEL_KEYS[lower] && event.key !== lower) markAll(LABEL_KEYS[lower]);
    else if (LABEL_KEYS[event.key]) mark(focus, LABEL_KEYS[event.key]);
    else if (event.key === 'ArrowDown' || event.key === 'ArrowUp') {
      focus = Math.min(items.length - 1, Math.max(0, focus + (event.key === 'ArrowDown' ? 1 : -1)));
      draw();
    } else if (/^[1-9]$/.test(event.key) && Number(event.key) <= current.n_hops) { focus = Number(event.key) - 1; draw(); }
    else if (event.key === 't') { focus = items.length - 1; draw(); }
    else if (event.key === 'n') note.focus();
    else if (event.key === 'Enter') saveAndNext();
    else if (event.key === 's') goNext().catch(showError);
    else if (event.key === 'v') root.classList.toggle('blind');
    else return false;
    event.preventDefault();
    return true;
  }
  note.addEventListener('keydown', event => {
    if (event.key === 'Enter') { event.preventDefault(); note.blur(); saveAndNext(); }
    if (event.key === 'Escape') note.blur();
  });
  draw();
  return {node, key};
}
