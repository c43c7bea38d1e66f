"""A page whose Web Workers draw ids and read the time: a dedicated worker (classic), a module
worker, a worker from a ``blob:`` URL and a SharedWorker, each drawing ``Math.random``,
``crypto.getRandomValues`` and ``crypto.randomUUID`` at its top level, before anything else runs, and
reading ``Date.now()``. The page shows what each sent once "Show the workers" is pressed: the ids,
and how far the worker's clock was from the page's as its message arrived, in whole seconds. The
SharedWorker shows what it draws half a second after a page connects, and what it drew in its first
turn (``first``: mmina holds it at its start by its script's response,
``mmina.recorder.shared_workers``, so that turn is seeded too). It also imports a script
(``/tally.js``) and fetches ``/numbers.json`` itself, and the page shows the sum it computes from
them (``sum 24``; a site made with ``factor`` 3 serves another tally: ``sum 36``)."""

from __future__ import annotations

import json

from tests.local_site import LocalSite, pages_handler

DRAW = """const drawn = {
  id: Math.random().toString(36).slice(2, 10),
  words: Array.from(crypto.getRandomValues(new Uint32Array(2))).join('.'),
  uuid: crypto.randomUUID(),
  now: Date.now(),
  perf: performance.now(),
};"""
WORKER = DRAW + "\npostMessage(drawn);"
MODULE = "import {extra} from './extra.js';\n" + DRAW + "\ndrawn.extra = extra;\npostMessage(drawn);"
EXTRA = "export const extra = Math.random().toString(36).slice(2, 8);"
SHARED = (
    "const seeded = Math.random.toString().includes('draw');\n"
    + DRAW.replace("const drawn", "const first")
    + "\nfirst.seeded = seeded;"
    + "\nimportScripts('/tally.js');"
    + "\nonconnect = (event) => setTimeout(async () => {\n"
    + DRAW
    + "\nconst numbers = await (await fetch('/numbers.json')).json();"
    + "\ndrawn.extra = `sum ${tally(numbers)}`;"
    + "\nevent.ports[0].postMessage({...drawn, first});\n}, 500);"
)
TALLY = "const tally = (numbers) => numbers.reduce((a, b) => a + b, 0) * %d;"
NUMBERS = "[3, 4, 5]"
PAGE = """<!doctype html><title>Harbour workers</title><h1>Harbour workers</h1>
<button id="show">Show the workers</button><ul id="out"></ul><script>
const got = {};
const heard = (name) => ({data}) => { got[name] = {...data, heard: Date.now()}; };
new Worker('/worker.js').onmessage = heard('dedicated');
new Worker('/module.js', {type: 'module'}).onmessage = heard('module');
new Worker(URL.createObjectURL(new Blob([%(blob)s], {type: 'text/javascript'}))).onmessage = heard('blob');
const shared = new SharedWorker('/shared.js');
shared.port.onmessage = heard('shared');
shared.port.start();
document.getElementById('show').addEventListener('click', () => {
  const out = document.getElementById('out');
  out.textContent = '';
  for (const name of ['dedicated', 'module', 'blob', 'shared']) {
    const d = got[name];
    const line = document.createElement('li');
    const first = d && d.first ? `first ${d.first.id} ` : '';
    line.textContent = d ? `${name}: ${d.id} ${d.words} ${d.uuid}${d.extra ? ' ' + d.extra : ''} ` +
      `${first}clock ${Math.round((d.now - d.heard) / 1000)} s` : `${name}: nothing`;
    out.append(line);
  }
});
</script>""" % {"blob": json.dumps(WORKER)}
KINDS = ("dedicated:", "module:", "blob:", "shared:")


def _kind(path: str) -> str:
    if path.endswith(".json"):
        return "application/json"
    return "text/javascript" if path.endswith(".js") else "text/html; charset=utf-8"


def worker_site(factor: int = 2, port: int = 0, asked: list[str] | None = None) -> LocalSite:
    """The page at ``/`` (not started: use it in ``with``) on ``port`` (0: a free one); the
    SharedWorker's tally multiplies by ``factor``; each request's path is added to ``asked``."""
    pages = {
        "/": PAGE,
        "/worker.js": WORKER,
        "/module.js": MODULE,
        "/extra.js": EXTRA,
        "/shared.js": SHARED,
        "/tally.js": TALLY % factor,
        "/numbers.json": NUMBERS,
    }
    handler = pages_handler(pages, _kind)

    class Counted(handler):  # type: ignore[valid-type,misc]
        def do_GET(self) -> None:  # noqa: N802 - the base class's name
            if asked is not None:
                asked.append(self.path)
            super().do_GET()

    return LocalSite(Counted, port)
