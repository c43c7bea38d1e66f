"""Real web applications nobody on this project wrote, each with a scripted episode.

Every application is installed from PyPI into a virtualenv of its own (``installs.app_venv``)
and started by :class:`RunningApp` on a free port with new random state: a new data folder,
new secrets, new random content. The browser reaches it under a fixed host name
(``<name>.realweb.test``, mapped by Chromium's host resolver) through a counting TCP relay, so
recorded URLs stay valid across restarts and every connection that reaches the application —
a replay must make none — is counted.

The scripts find their targets by role and name in the observation (the oracle agent's
``reference_script``), never by element id.
"""

from __future__ import annotations

import json
import random
import secrets
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.realweb.installs import app_venv, npm_packages

DOMAIN = "realweb.test"
START_TIMEOUT_S = 180.0
"""Until an application answers its first request (Gradio and Streamlit import a lot)."""
THINK_S = (0.8, 2.0)
"""The scripted agent thinks this long before each action (``agents.ThinkingOracle``)."""
WORDS = (
    "harbour",
    "kittiwake",
    "lantern",
    "mooring",
    "tide",
    "gull",
    "anchor",
    "ferry",
    "pier",
    "beacon",
    "buoy",
    "quay",
    "saltmarsh",
    "trawler",
    "skiff",
    "dune",
    "estuary",
    "jetty",
)


def click(name: str, role: str = "link") -> dict[str, Any]:
    return {"action": "click", "target": {"role": role, "name": name}}


def type_into(name: str, text: str, role: str = "textbox", enter: bool = False) -> dict[str, Any]:
    return {"action": "type", "target": {"role": role, "name": name}, "text": text, "enter": enter}


def stop(answer: str) -> dict[str, Any]:
    return {"action": "stop", "answer": answer}


BACK = {"action": "go_back"}
FORWARD = {"action": "go_forward"}


@dataclass(frozen=True)
class App:
    """One application: how to install it, lay out new random state, start it, and its episode."""

    name: str
    kind: str
    requirements: tuple[str, ...]
    prepare: Callable[[Path, random.Random], None]
    """Lays out new random state in a fresh folder (a database, a project, an environment)."""
    command: Callable[[Path, Path, int], list[str]]
    """(the venv's bin folder, the state folder, the port) -> the command that serves it."""
    script: tuple[dict[str, Any], ...]
    path: str = "/"
    ready_path: str = "/"
    venv: str = ""
    """The virtualenv it runs in (default: its name; two apps of one framework share one)."""
    warm: Callable[[Path, Path, int], None] | None = None
    """What a user did before the episode, once it answers (venv bin, state, port): open a notebook's kernel."""

    @property
    def host(self) -> str:
        return f"{self.name}.{DOMAIN}"

    def thinking(self) -> tuple[dict[str, Any], ...]:
        """The script with the agent's thinking before each step (``think`` seconds, drawn
        per application between ``THINK_S``): the held-out runs' agent took seconds per step."""
        draw = random.Random(self.name)
        return tuple(
            {**step, "think": round(draw.uniform(*THINK_S), 2)} for step in [*self.script, stop("done")]
        )

    def task(self, task_id: int) -> dict[str, Any]:
        return {
            "task_id": task_id,
            "intent": f"Real web, {self.name} ({self.kind}): follow the script.",
            "start_url": f"http://{self.host}{self.path}",
            "eval": {
                "eval_types": ["string_match"],
                "reference_answers": {"must_include": ["done"]},
                "reference_url": "",
                "program_html": [],
                "string_note": "",
                "reference_answer_raw_annotation": "done",
            },
            "procedure": ["realweb", "end"],
            "reference_script": list(self.thinking()),
        }


def app_file(source: str) -> Callable[[Path, random.Random], None]:
    """The state of an application that is one small file: the file, and a new random salt that
    it reads (``HARBOUR_SALT``) to draw its content."""

    def prepare(folder: Path, draw: random.Random) -> None:
        (folder / "app.py").write_text(source)
        (folder / "salt").write_text(f"{draw.randint(0, 16**6):06x}")

    return prepare


def run_app_file(bin_: Path, state: Path, port: int) -> list[str]:
    """The command that serves an application file which starts its own server (on ``PORT``)."""
    return [str(bin_ / "python"), str(state / "app.py")]


# ---------------------------------------------------------------- Datasette: a data browser


def _datasette_state(folder: Path, draw: random.Random) -> None:
    """A harbour database with random boats and captains."""
    database = sqlite3.connect(folder / "harbour.db")
    database.execute("create table captains (id integer primary key, name text, since integer)")
    database.execute(
        "create table boats (id integer primary key, name text, captain_id integer "
        "references captains(id), length_m real, berth text)"
    )
    for number in range(1, 9):
        database.execute(
            "insert into captains values (?, ?, ?)",
            (number, f"{draw.choice(WORDS).title()} {draw.choice(WORDS).title()}", draw.randint(1980, 2024)),
        )
    for number in range(1, 41):
        database.execute(
            "insert into boats values (?, ?, ?, ?, ?)",
            (
                number,
                f"{draw.choice(WORDS).title()} {draw.randint(1, 999)}",
                draw.randint(1, 8),
                round(draw.uniform(4, 40), 1),
                f"{draw.choice('ABCD')}{draw.randint(1, 60)}",
            ),
        )
    database.commit()
    database.close()
    (folder / "secret").write_text(secrets.token_hex(16))


DATASETTE = App(
    "datasette",
    "data browser (server-rendered tables, JSON, a little JS)",
    ("datasette==0.65.5",),
    _datasette_state,
    lambda bin_, state, port: [
        str(bin_ / "datasette"),
        "serve",
        str(state / "harbour.db"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--secret",
        (state / "secret").read_text(),
        "--setting",
        "suggest_facets",
        "off",
    ],
    (click("harbour"), click("boats"), click("1"), BACK, BACK, click("captains"), click("1")),
)


# ---------------------------------------------------------------- Trac: a classic server-rendered app


def _trac_state(folder: Path, draw: random.Random) -> None:
    """Random project words; the environment itself (new secrets, anonymous users allowed to
    file tickets, random ticket types) is made by ``_trac_command``, with the app's venv."""
    (folder / "words").write_text(" ".join(draw.sample(WORDS, 4)))


def _trac_admin(bin_: Path, state: Path, *args: str) -> None:
    subprocess.run(
        [str(bin_ / "trac-admin"), str(state / "env"), *args], check=True, capture_output=True, timeout=120
    )


def _trac_command(bin_: Path, state: Path, port: int) -> list[str]:
    if not (state / "env").exists():
        words = (state / "words").read_text()
        _trac_admin(bin_, state, "initenv", f"Harbour {words.split()[0].title()}", "sqlite:db/trac.db")
        _trac_admin(bin_, state, "permission", "add", "anonymous", "TICKET_CREATE", "TICKET_MODIFY")
        for number, word in enumerate(words.split(), start=1):
            _trac_admin(bin_, state, "ticket_type", "add", f"{word}-{number}")
    return [str(bin_ / "tracd"), "--hostname", "127.0.0.1", "--port", str(port), "-s", str(state / "env")]


TRAC = App(
    "trac",
    "classic server-rendered issue tracker (sessions, forms, CSRF __FORM_TOKEN)",
    ("trac==1.6",),
    _trac_state,
    _trac_command,
    (
        click("New Ticket"),
        type_into("Summary:", "The harbour light is out"),
        type_into("Keywords:", "lighthouse pier"),
        click("Create ticket", role="button"),
        click("View Tickets"),
        click("Timeline"),
        click("Wiki"),
    ),
)


# ---------------------------------------------------------------- MkDocs-Material: a documentation site

DOCS_PAGES = ("index", "setup", "usage", "reference")
MKDOCS_HOST = f"mkdocs.{DOMAIN}"
"""Material's instant navigation needs ``site_url``."""


def _mkdocs_state(folder: Path, draw: random.Random) -> None:
    """A generated docs project with random words, built by ``mkdocs build`` into ``site``."""
    docs = folder / "docs"
    docs.mkdir()
    for page in DOCS_PAGES:
        words = " ".join(draw.choice(WORDS) for _ in range(60))
        title = "Harbour guide" if page == "index" else page.title()
        (docs / f"{page}.md").write_text(
            f"# {title}\n\n{words}\n\n## Moorings\n\n"
            f"The {draw.choice(WORDS)} is at berth {draw.randint(1, 99)}.\n"
        )
    (folder / "mkdocs.yml").write_text(
        textwrap.dedent(f"""\
        site_name: Harbour docs {draw.randint(1, 9999)}
        site_url: http://{MKDOCS_HOST}/
        theme:
          name: material
          features: [navigation.instant, search.suggest]
        plugins: [search]
        nav: [{", ".join(f"{p}.md" for p in DOCS_PAGES)}]
        """)
    )


def _mkdocs_command(bin_: Path, state: Path, port: int) -> list[str]:
    if not (state / "site").exists():
        subprocess.run(
            [str(bin_ / "mkdocs"), "build", "-q", "-f", str(state / "mkdocs.yml"), "-d", str(state / "site")],
            check=True,
            capture_output=True,
            timeout=300,
        )
    return [
        str(bin_ / "python"),
        "-m",
        "http.server",
        str(port),
        "--bind",
        "127.0.0.1",
        "-d",
        str(state / "site"),
    ]


MKDOCS = App(
    "mkdocs",
    "static documentation site (instant navigation, anchors, its search index in a Web Worker, RxJS)",
    ("mkdocs-material==9.8.2",),
    _mkdocs_state,
    _mkdocs_command,
    (click("Setup"), click("Usage"), click("Moorings"), click("Reference"), BACK, FORWARD),
)


# ---------------------------------------------------------------- MkDocs' dev server: a long-poll and a Web Worker

LIVEDOCS_HOST = f"livedocs.{DOMAIN}"


def _livedocs_state(folder: Path, draw: random.Random) -> None:
    """The docs project of ``_mkdocs_state`` (new random words) on MkDocs' own ``readthedocs`` theme,
    whose search runs in a Web Worker; ``mkdocs serve`` builds it when it starts."""
    _mkdocs_state(folder, draw)
    config = (folder / "mkdocs.yml").read_text().replace(MKDOCS_HOST, LIVEDOCS_HOST)
    config = config.replace(
        "  name: material\n  features: [navigation.instant, search.suggest]\n", "  name: readthedocs\n"
    )
    (folder / "mkdocs.yml").write_text(config)


LIVEDOCS = App(
    "livedocs",
    "documentation dev server (mkdocs serve): every page holds a live-reload long-poll its server answers "
    "only after 60 s or a rebuild, and the search index is built in a Web Worker",
    MKDOCS.requirements,
    _livedocs_state,
    lambda bin_, state, port: [
        str(bin_ / "mkdocs"),
        "serve",
        "-f",
        str(state / "mkdocs.yml"),
        "-a",
        f"127.0.0.1:{port}",
        "--livereload",
    ],
    (
        click("Setup"),
        click("Usage"),
        click("Moorings"),
        click("Reference"),
        BACK,
        FORWARD,
        type_into("Search docs", "harbour", enter=True),
    ),
    venv="mkdocs",
)


# ---------------------------------------------------------------- Gradio: an SPA streaming over fetch

GRADIO_APP = """
import os, random, time
import gradio as gr

SALT = os.environ["HARBOUR_SALT"]
draw = random.Random(SALT)

def greet(name):
    return f"Welcome aboard, {name}! Ticket {SALT}-{draw.randint(100, 999)}"

def tides(count):
    for hour in range(int(count)):
        time.sleep(0.2)
        yield f"Tide table: {hour + 1} of {int(count)} hours read ({SALT})"

with gr.Blocks(title="Harbour desk", analytics_enabled=False) as demo:
    name = gr.Textbox(label="Your name")
    greeting = gr.Textbox(label="Greeting")
    gr.Button("Greet").click(greet, name, greeting)
    hours = gr.Number(label="Hours", value=3)
    table = gr.Textbox(label="Tides")
    gr.Button("Read tides").click(tides, hours, table)

demo.queue().launch(server_name="127.0.0.1", server_port=int(os.environ["PORT"]))
"""


GRADIO = App(
    "gradio",
    "SPA (Svelte) whose queue streams server-sent events over fetch",
    ("gradio==6.31.0",),
    app_file(GRADIO_APP),
    run_app_file,
    (
        type_into("Your name", "Mira"),
        click("Greet", role="button"),
        click("Read tides", role="button"),
        type_into("Your name", "Ola"),
        click("Greet", role="button"),
    ),
)


# ---------------------------------------------------------------- Streamlit: a dashboard over a WebSocket

STREAMLIT_APP = """
import os, random
import streamlit as st

SALT = os.environ["HARBOUR_SALT"]
st.title("Harbour dashboard")
boat = st.selectbox("Boat", ["Kittiwake", "Morning Star", "Sea Holly"])
name = st.text_input("Skipper")
if name:
    st.write(f"Berth for {boat}, skipper {name}: code {SALT}-{random.Random(SALT + boat + name).randint(1, 99)}")
st.write(f"Boats in harbour: {random.Random(SALT).randint(10, 60)}")
"""


STREAMLIT = App(
    "streamlit",
    "dashboard app talking over a WebSocket",
    ("streamlit==1.67.0",),
    app_file(STREAMLIT_APP),
    lambda bin_, state, port: [
        str(bin_ / "streamlit"),
        "run",
        str(state / "app.py"),
        "--server.port",
        str(port),
        "--server.address",
        "127.0.0.1",
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--server.fileWatcherType",
        "none",
    ],
    (
        type_into("Skipper", "Mira", enter=True),
        click("Open", role="button"),
        click("Sea Holly", role="option"),
        type_into("Skipper", "Ola", enter=True),
        click("Open", role="button"),
        click("Morning Star", role="option"),
    ),
    ready_path="/_stcore/health",
)


# ---------------------------------------------------------------- NiceGUI: Vue/Quasar over socket.io

NICEGUI_APP = """
import asyncio, os, random
from nicegui import app, ui

SALT = os.environ["HARBOUR_SALT"]
draw = random.Random(SALT)
app.config.socket_io_js_transports = ["polling", "websocket"]  # socket.io's default: long-polling, then the upgrade


@ui.page("/")
def harbour():
    ui.label("Harbour control").classes("text-h5")
    gauge = ui.label("Tide gauge: connecting")
    ui.timer(1.0, lambda: gauge.set_text(f"Tide gauge online ({SALT})"), once=True)
    readings = {"count": 0}
    line = ui.label("Reading 0")

    def tick():
        readings["count"] += 1
        line.set_text(f"Reading {readings['count']}: {draw.randint(100, 999)} cm")

    ui.timer(3.0, tick, immediate=False)
    vessel = ui.input("Vessel")
    answer = ui.label("No berth booked")

    async def book():
        answer.set_text("Checking the berths ...")
        await asyncio.sleep(1.0)
        answer.set_text(f"Berth {draw.choice('ABCD')}{draw.randint(1, 60)} for {vessel.value}")

    ui.button("Book berth", on_click=book)
    table = ui.table(columns=[{"name": "boat", "label": "Boat", "field": "boat"},
                              {"name": "berth", "label": "Berth", "field": "berth"}], rows=[], row_key="boat")
    ui.button("Add arrival", on_click=lambda: table.add_row({"boat": f"{vessel.value} {draw.randint(1, 99)}",
                                                            "berth": draw.randint(1, 60)}))


ui.run(host="127.0.0.1", port=int(os.environ["PORT"]), reload=False, show=False, title="Harbour control")
"""


NICEGUI = App(
    "nicegui",
    "Vue/Quasar app over socket.io (long-polling, then the WebSocket upgrade): server pushes, a one-shot and a "
    "repeating timer, results 1 s later",
    ("nicegui==3.18.0",),
    app_file(NICEGUI_APP),
    run_app_file,
    (
        type_into("Vessel", "Kittiwake"),
        click("Book berth", role="button"),
        click("Add arrival", role="button"),
        type_into("Vessel", "Morning Star"),
        click("Book berth", role="button"),
        click("Add arrival", role="button"),
    ),
)


# ---------------------------------------------------------------- Shiny: a dashboard over a plain WebSocket

SHINY_APP = """
import asyncio, os, random
from shiny import App, reactive, render, ui

SALT = os.environ["HARBOUR_SALT"]
draw = random.Random(SALT)

app_ui = ui.page_fluid(
    ui.h2("Harbour dashboard"),
    ui.output_text("gauge"),
    ui.input_text("skipper", "Skipper"),
    ui.input_action_button("book", "Book mooring"),
    ui.output_text("booking"),
)


def server(input, output, session):
    count = reactive.value(0)

    @reactive.effect
    def _tick():
        reactive.invalidate_later(3)
        with reactive.isolate():
            count.set(count.get() + 1)

    @render.text
    def gauge():
        return f"Gauge reading {count()}: {draw.randint(100, 999)} cm ({SALT})"

    @render.text
    @reactive.event(input.book)
    async def booking():
        await asyncio.sleep(1.0)
        return f"Mooring {draw.randint(1, 60)} for {input.skipper()}"


app = App(app_ui, server)
"""


SHINY = App(
    "shiny",
    "dashboard framework over a plain WebSocket: a server timer every 3 s, a result 1 s after a click",
    ("shiny==1.8.0",),
    app_file(SHINY_APP),
    lambda bin_, state, port: [
        str(bin_ / "shiny"),
        "run",
        str(state / "app.py"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ],
    (
        type_into("Skipper", "Mira"),
        click("Book mooring", role="button"),
        type_into("Skipper", "Ola"),
        click("Book mooring", role="button"),
        type_into("Skipper", "Ines"),
        click("Book mooring", role="button"),
    ),
)


# ---------------------------------------------------------------- Gradio: loading status and toasts

GRADIO_STATUS_APP = """
import os, random, time
import gradio as gr

SALT = os.environ["HARBOUR_SALT"]
draw = random.Random(SALT)

def forecast(port):
    time.sleep(1.2)
    gr.Info(f"Forecast ready for {port}")
    return f"{port}: wind {draw.randint(2, 30)} knots, swell {draw.randint(1, 9)} ft ({SALT})"

with gr.Blocks(title="Harbour forecast", analytics_enabled=False) as demo:
    port = gr.Textbox(label="Port")
    result = gr.Textbox(label="Forecast")
    gr.Button("Get forecast").click(forecast, port, result)

demo.queue().launch(server_name="127.0.0.1", server_port=int(os.environ["PORT"]))
"""


GRADIO_STATUS = App(
    "gradiostatus",
    "Gradio Blocks app with a loading status region and toasts (aria-live)",
    GRADIO.requirements,
    app_file(GRADIO_STATUS_APP),
    run_app_file,
    (
        type_into("Port", "Whitby"),
        click("Get forecast", role="button"),
        type_into("Port", "Oban"),
        click("Get forecast", role="button"),
        type_into("Port", "Cobh"),
        click("Get forecast", role="button"),
    ),
    venv="gradio",
)


# ---------------------------------------------------------------- Swagger UI: an SPA from a 1.5 MB bundle

SWAGGER_APP = """
import os, random
from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.staticfiles import StaticFiles

SALT = os.environ["HARBOUR_SALT"]
draw = random.Random(SALT)
app = FastAPI(title=f"Harbour API {SALT}", docs_url=None, redoc_url=None)
app.mount("/static", StaticFiles(directory=os.environ["SWAGGER_DIST"]), name="static")


@app.get("/", include_in_schema=False)
def docs():
    return get_swagger_ui_html(openapi_url="/openapi.json", title="Harbour API",
                               swagger_js_url="/static/swagger-ui-bundle.js",
                               swagger_css_url="/static/swagger-ui.css",
                               swagger_favicon_url="/static/favicon-32x32.png")


@app.get("/berths", tags=["berths"], summary="List the free berths")
def berths(limit: int = 3):
    return [{"berth": f"{draw.choice('ABCD')}{draw.randint(1, 60)}", "length_m": draw.randint(6, 40)}
            for _ in range(limit)]


@app.get("/tides", tags=["tides"], summary="Read the tide table")
def tides():
    return {"high": f"{draw.randint(0, 23):02d}:{draw.randint(0, 59):02d}", "salt": SALT}
"""
SWAGGER_UI = ("swagger-ui-dist@5.35.0",)


def _swagger_state(folder: Path, draw: random.Random) -> None:
    app_file(SWAGGER_APP)(folder, draw)
    (folder / "dist").symlink_to(npm_packages(SWAGGER_UI, "npm-swagger") / "swagger-ui-dist")


SWAGGER = App(
    "swagger",
    "API explorer SPA (Swagger UI's 1.5 MB minified bundle) over a FastAPI server",
    ("fastapi==0.163.2", "uvicorn==0.54.0"),
    _swagger_state,
    lambda bin_, state, port: [str(bin_ / "uvicorn"), "app:app", "--host", "127.0.0.1", "--port", str(port)],
    (
        click("GET /berths List the free berths", role="button"),
        click("Try it out", role="button"),
        click("Execute", role="button"),
        click("GET /tides Read the tide table", role="button"),
        click("Try it out", role="button"),
        click("Execute", role="button"),
    ),
)


# ---------------------------------------------------------------- Dash: a dashboard that prints time

DASH_APP = """
import os, random, time
from dash import Dash, Input, Output, clientside_callback, dcc, html

SALT = os.environ["HARBOUR_SALT"]
draw = random.Random(SALT)
BOATS = ("Kittiwake", "Morning Star", "Sea Holly")
app = Dash(__name__, title="Harbour dashboard")
app.layout = html.Div([
    html.H1("Harbour dashboard"),
    html.Button("Refresh", id="refresh"),
    html.Button("Reload tides", id="reload"),
    html.P("Loading", id="updated"),
    *[html.P("", id=f"age-{number}") for number in range(len(BOATS))],
    dcc.Graph(id="tides"),
    dcc.Store(id="data"),
])


@app.callback(Output("data", "data"), Input("refresh", "n_clicks"), Input("reload", "n_clicks"))
def load(_refreshed, _reloaded):
    now = time.time() * 1000
    return {"salt": SALT, "levels": [draw.randint(1, 9) for _ in range(12)],
            "berthed": [now - draw.uniform(3e3, 50e3) for _ in BOATS]}


@app.callback(Output("tides", "figure"), Input("data", "data"))
def tides(data):
    return {"data": [{"y": (data or {}).get("levels", []), "type": "bar", "name": "tide"}],
            "layout": {"title": {"text": "Tide levels"}}}


clientside_callback(
    "function (data) { return data ? 'Last updated ' + new Date().toISOString().slice(11, 19) + ' (' + data.salt + ')'"
    " : window.dash_clientside.no_update; }",
    Output("updated", "children"), Input("data", "data"))
clientside_callback(
    "function (data) { const boats = %s; if (!data) return boats.map(() => ''); return boats.map((b, i) =>"
    " b + ' berthed ' + Math.floor((Date.now() - data.berthed[i]) / 1000) + ' seconds ago'); }" % (list(BOATS),),
    [Output(f"age-{number}", "children") for number in range(len(BOATS))],
    Input("data", "data"))

app.run(host="127.0.0.1", port=int(os.environ["PORT"]), debug=False)
"""


DASH = App(
    "dash",
    "Plotly Dash dashboard: a multi-MB plotly.js bundle, then data it stamps when it arrived "
    '("Last updated 12:04:31") and relative times it computes as it renders them ("12 seconds ago")',
    ("dash==4.4.1",),
    app_file(DASH_APP),
    run_app_file,
    (
        click("Refresh", role="button"),
        click("Reload tides", role="button"),
        click("Refresh", role="button"),
        click("Reload tides", role="button"),
        click("Refresh", role="button"),
    ),
)


# ---------------------------------------------------------------- JupyterLab: ids the page draws, echoed by the kernel


def _jupyter_state(folder: Path, draw: random.Random) -> None:
    """A notebook with random numbers in its cells (the kernel prints them when they run)."""
    cells = [
        f"tide = {draw.randint(100, 999)}\nprint(f'Tide gauge reads {{tide}} cm at berth {draw.choice(WORDS)}')",
        f"sorted({[draw.randint(1, 60) for _ in range(5)]})",
        f"'{draw.choice(WORDS)}'.upper() * {draw.randint(2, 3)}",
    ]
    notebook = {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "id": f"cell-{number}",
                "metadata": {},
                "outputs": [],
                "source": source,
            }
            for number, source in enumerate(cells)
        ],
        "metadata": {
            "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    settings = folder / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false"})
    )  # no news prompt
    (folder / "notebooks").mkdir()
    (folder / "notebooks" / "harbour.ipynb").write_text(json.dumps(notebook, indent=1))


def _server_options(state: Path, port: int) -> list[str]:
    """jupyter_server on ``port`` serving ``state/notebooks``, no token, reached under its host name."""
    return [
        "--no-browser",
        "--allow-root",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={state / 'notebooks'}",
        "--IdentityProvider.token=",
        "--ServerApp.password=",
        "--ServerApp.allow_remote_access=True",
        "--ServerApp.terminals_enabled=False",
    ]


def _jupyter_command(bin_: Path, state: Path, port: int) -> list[str]:
    app = "--JupyterNotebookApp"
    return [
        str(bin_ / "jupyter-notebook"),
        *_server_options(state, port),
        f"{app}.user_settings_dir={state / 'settings'}",
        f"{app}.news_url=None",
        f"{app}.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]


RUN_CELL = "Run this cell and advance (Shift+Enter)"
JUPYTER = App(
    "jupyter",
    "notebook (Jupyter Notebook 7 over jupyter_server): the page draws session and message ids and the "
    "kernel's WebSocket, binary-framed JSON, echoes them in its replies' parent headers",
    ("notebook==7.6.5", "ipykernel==7.4.0"),
    _jupyter_state,
    _jupyter_command,
    (
        click(RUN_CELL, role="button"),
        click(RUN_CELL, role="button"),
        click("Save and create checkpoint (Ctrl+S)", role="button"),
        click(RUN_CELL, role="button"),
        click("Restart the kernel and run all cells", role="button"),
        click("Confirm Kernel Restart", role="button"),
    ),
    path="/notebooks/harbour.ipynb",
    ready_path="/api/status",
)


KERNEL_READY = """
import sys
from jupyter_client import BlockingKernelClient
client = BlockingKernelClient()
client.load_connection_file(sys.argv[1])
client.start_channels()
client.wait_for_ready(timeout=120)
"""


def _running_kernel(bin_: Path, state: Path, port: int) -> None:
    """Open the notebook's session and wait until its kernel answers, as a notebook a user left
    open has: the episode opens a notebook whose kernel runs."""
    cookies = urllib.request.HTTPCookieProcessor()
    opener = urllib.request.build_opener(cookies)
    base = f"http://127.0.0.1:{port}"
    opener.open(f"{base}/tree", timeout=30).read()  # sets the _xsrf cookie a POST must echo
    xsrf = next(c.value or "" for c in cookies.cookiejar if c.name == "_xsrf")
    body = json.dumps(
        {"path": "harbour.ipynb", "name": "harbour.ipynb", "type": "notebook", "kernel": {"name": "python3"}}
    ).encode()
    request = urllib.request.Request(
        f"{base}/api/sessions", body, {"Content-Type": "application/json", "X-XSRFToken": xsrf}, method="POST"
    )
    kernel = json.loads(opener.open(request, timeout=120).read())["kernel"]["id"]
    connection = state / ".local" / "share" / "jupyter" / "runtime" / f"kernel-{kernel}.json"
    deadline = time.monotonic() + START_TIMEOUT_S
    while not connection.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    done = subprocess.run(
        [str(bin_ / "python"), "-c", KERNEL_READY, str(connection)],
        capture_output=True,
        text=True,
        timeout=150,
        env={"HOME": str(state), "PATH": f"{bin_}:/usr/bin:/bin"},
    )
    if done.returncode != 0:
        raise RuntimeError(f"the notebook's kernel did not answer:\n{done.stderr[-2000:]}")


NBCLASSIC = App(
    "nbclassic",
    "classic notebook (NbClassic over jupyter_server, jQuery and RequireJS) whose kernel runs: the page "
    "draws its kernel session and message ids, and the kernel's WebSocket echoes them in JSON replies",
    ("nbclassic==1.3.3", "ipykernel==7.4.0"),
    _jupyter_state,
    lambda bin_, state, port: [str(bin_ / "jupyter-nbclassic"), *_server_options(state, port)],
    (
        click("Run", role="button"),
        click("Run", role="button"),
        click("File"),
        click("Save and Checkpoint Ctrl-S", role="menuitem"),
        click("Run", role="button"),
        click("Don't show anymore", role="button"),
    ),
    path="/notebooks/harbour.ipynb",
    ready_path="/api/status",
    warm=_running_kernel,
)


# ---------------------------------------------------------------- a hand-written shop: history navigation

SHOP = App(
    "shop",
    "hand-written server-rendered shop over HTTP/1.0 without cache headers (history navigation, beacons)",
    (),
    lambda _folder, _draw: None,
    lambda _bin, _state, port: [sys.executable, str(Path(__file__).with_name("shop_site.py")), str(port)],
    (
        click("Kittiwake lamp"),
        BACK,
        FORWARD,
        click("Add to cart"),
        click("Your cart"),
        type_into("Name", "Mira"),
        click("Place order", role="button"),
        BACK,
        BACK,
    ),
)
"""Not from a registry: written to reproduce a held-out shop whose history navigation hung a
replay (issue 30, item 3; see ``shop_site.py``). Its random state is drawn by the server itself."""


APPS: tuple[App, ...] = (
    DATASETTE,
    TRAC,
    MKDOCS,
    GRADIO,
    STREAMLIT,
    NICEGUI,
    SHINY,
    GRADIO_STATUS,
    SWAGGER,
    SHOP,
    DASH,
    JUPYTER,
    LIVEDOCS,
    NBCLASSIC,
)
SAMPLE = ("datasette",)
"""What the test suite runs by default: one application that replays the same way on a busy machine
(server-rendered pages, JSON, history navigation; no push whose timing a loaded machine shifts).
A WebSocket is recorded and replayed by default in the hard web (test_hard_web.py), the socket
clock and the recorded pace in test_socket_replay.py; ``python -m bench --only realweb`` runs every
application."""


# ---------------------------------------------------------------- running one


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Relay:
    """A TCP relay in front of an application that counts the connections reaching it."""

    target: int
    connections: int = 0
    _server: socket.socket | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> int:
        self._server = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._accept, daemon=True).start()
        return self._server.getsockname()[1]

    def _accept(self) -> None:
        assert self._server is not None
        while True:
            try:
                client, _address = self._server.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._pair, args=(client,), daemon=True).start()

    def _pair(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target), timeout=30)
        except OSError:
            client.close()
            return
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pump, args=(source, sink), daemon=True).start()

    def close(self) -> None:
        if self._server is not None:
            self._server.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class RunningApp:
    """An application started with new random state: ``with RunningApp(app, folder) as running``;
    :meth:`restart` stops it and starts it again with new state on a new port."""

    def __init__(self, app: App, folder: Path) -> None:
        self.app, self.folder = app, folder
        self.bin = app_venv(app.venv or app.name, app.requirements)
        self.starts = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._relay: Relay | None = None
        self.relay_port = 0

    def chromium_args(self) -> list[str]:
        return [f"--host-resolver-rules=MAP {self.app.host} 127.0.0.1:{self.relay_port}"]

    @property
    def connections(self) -> int:
        """Connections that reached the application since it last started."""
        return self._relay.connections if self._relay else 0

    def __enter__(self) -> RunningApp:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        self.starts += 1
        state = self.folder / f"state-{self.starts}"
        state.mkdir(parents=True)
        self.app.prepare(state, random.Random(secrets.randbits(64)))
        port = free_port()
        environment = {
            "PATH": f"{self.bin}:/usr/bin:/bin",
            "HOME": str(state),
            "PORT": str(port),
            "HARBOUR_SALT": (state / "salt").read_text() if (state / "salt").exists() else "",
            "GRADIO_ANALYTICS_ENABLED": "False",
            "HF_HUB_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
            "SWAGGER_DIST": str(state / "dist"),
        }
        command = self.app.command(self.bin, state, port)
        log = (state / "server.log").open("wb")
        self._process = subprocess.Popen(
            command, cwd=state, env=environment, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            _wait_until_up(port, self.app.ready_path, self._process, state / "server.log")
            if self.app.warm is not None:
                self.app.warm(self.bin, state, port)
        except BaseException:
            self.stop()  # never leave a server behind (``__exit__`` does not run when ``__enter__`` failed)
            raise
        self._relay = Relay(port)
        self.relay_port = self._relay.start()

    def stop(self) -> None:
        if self._relay is not None:
            self._relay.close()
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=20)
            self._process = None

    def restart(self) -> None:
        self.stop()
        self.start()


def _wait_until_up(port: int, path: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the application exited ({process.returncode}):\n{log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5):
                return
        except urllib.error.HTTPError:
            return  # it answers (an error page is an answer)
        except OSError:
            time.sleep(0.3)
    process.kill()
    raise RuntimeError(
        f"the application did not answer within {START_TIMEOUT_S:.0f} s:\n{log.read_text()[-2000:]}"
    )


def write_suite(folder: Path, apps: tuple[App, ...]) -> Path:
    """One task per application as ``folder/realweb/N.json``; returns the suite folder."""
    suite = folder / "realweb"
    suite.mkdir(parents=True, exist_ok=True)
    for number, app in enumerate(apps, start=1):
        (suite / f"{number}.json").write_text(json.dumps(app.task(number), indent=2))
    return suite
