"""Run the official MMInA runner's own code on recorded trajectories (not part of the tests).

    python harness.py OFFICIAL_CHECKOUT trajectories.json > official.json

OFFICIAL_CHECKOUT is a checkout of github.com/shulin16/MMInA (commit 9b0a707), never
committed here. The runner's ``test()`` loop (run.py) and its evaluators run unchanged;
only what needs a browser, a model or a network is replaced, as a maintainer would:

* the browser: ``ScriptBrowserEnv`` answers ``reset``/``step`` with the recorded URLs (the
  first observation's URL, then the URL after each action; the terminal observation's URL
  after the last one), and ``env.page`` is a Playwright ``Page`` whose ``url`` is that URL;
* the agent: the recorded action texts, parsed by the runner's own ``create_id_based_action``
  as its ``TeacherForcingAgent`` does (an unparsable text is the ``NONE`` action; a step
  without an action likewise); once the recording has no action left, a ``stop`` with an
  empty answer;
* the HTML rendering of each step (``RenderHelper.render``) is skipped; its constructor runs;
* modules the loop imports but never uses here (torch, transformers, cairosvg, bs4) are stubs.

For each trajectory it prints what the runner logged: the result line (PASS / FAIL / none),
the ``[Unhandled Error]`` text, ``cnt_ans`` and ``cnt_cl`` (read from the loop's frame when
it logs), and this task's share of ``[Result] all success rate: all_pass/all_all``.
Trajectories whose task needs the LLM judge or ``program_html`` are reported but marked.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import types
from pathlib import Path


def stub_modules() -> None:
    """Modules imported at load time by the runner but not used on this path."""

    class Anything:
        def __init__(self, *args, **kwargs):
            pass

        def __call__(self, *args, **kwargs):
            return Anything()

        def __getattr__(self, name):
            return Anything()

        @classmethod
        def from_pretrained(cls, *args, **kwargs):
            return Anything()

    for name in ("torch", "transformers", "cairosvg", "bs4", "vllm"):
        module = types.ModuleType(name)
        module.__getattr__ = lambda attr: Anything  # type: ignore[attr-defined]
        sys.modules[name] = module


SITES = {
    "SHOPPING": "http://localhost:7770",
    "SHOPPING_ADMIN": "http://localhost:7780/admin",
    "REDDIT": "http://localhost:9999",
    "GITLAB": "http://localhost:8023",
    "MAP": "http://localhost:3000",
    "WIKIPEDIA": "http://localhost:8888",
    "HOMEPAGE": "http://localhost:4399",
}


def load_runner(checkout: Path):
    sys.path.insert(0, str(checkout))
    os.environ.setdefault("OPENAI_API_KEY", "harness-no-requests")
    for name, url in SITES.items():  # what prepare.sh exports; browser_env/env_config.py asserts them
        os.environ.setdefault(name, url)
    stub_modules()
    import run  # noqa: E402 - the official run.py

    return run


class Probe(logging.Handler):
    """Reads what the runner logs, and the loop's locals at that moment."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        frame = sys._getframe(0)
        while frame is not None and frame.f_code.co_name != "test":
            frame = frame.f_back
        local = dict(frame.f_locals) if frame is not None else {}
        self.records.append(
            {
                "message": record.getMessage(),
                "cnt_ans": local.get("cnt_ans"),
                "cnt_cl": local.get("cnt_cl"),
                "all_pass": local.get("all_pass"),
                "all_all": local.get("all_all"),
            }
        )


def build(run, trajectories: dict[str, dict], workdir: Path):
    from browser_env.actions import (
        ActionParsingError,
        create_id_based_action,
        create_none_action,
        create_stop_action,
    )
    from browser_env.utils import DetachedPage
    from playwright.sync_api import Page

    class RecordedPage(Page):
        def __init__(self, url: str) -> None:  # no Playwright connection: only .url is read
            self._recorded_url = url

        @property
        def url(self) -> str:
            return self._recorded_url

    def observation(url: str) -> dict:
        return {"text": "", "image": None, "current_url": url}

    def info(url: str) -> dict:
        return {
            "page": DetachedPage(url, ""),
            "fail_error": "",
            "observation_metadata": {"text": {"obs_nodes_info": {}}, "image": {}},
        }

    class RecordedEnv:
        def __init__(self, **kwargs) -> None:
            self.pages: list[str] = []
            self.page = None

        def reset(self, *, options=None, task_cnt=0, hop_cnt=0, seed=None):
            trajectory = trajectories[options["config_file"]]
            self.pages = [s["url"] for s in trajectory["steps"]] + [trajectory.get("final_url")]
            self.at = 0
            if not trajectory["steps"]:
                raise RuntimeError("the start page could not be opened (the episode has no observation)")
            self.page = RecordedPage(self.pages[0])
            return observation(self.pages[0]), info(self.pages[0])

        def step(self, action, task_cnt=0, hop_cnt=0):
            self.at += 1
            url = self.pages[self.at]
            if url is None:
                raise RuntimeError("the recording does not know the page after the last action")
            self.page = RecordedPage(url)
            return observation(url), 1.0, False, False, info(url), url

        def get_page_client(self, page):
            return None

        def save_trace(self, path) -> None:
            pass

        def close(self) -> None:
            pass

    class RecordedAgent(run.TeacherForcingAgent):
        def reset(self, test_config_file: str) -> None:
            self.actions = []
            for step in trajectories[test_config_file]["steps"]:
                text = step.get("action")
                try:
                    action = create_id_based_action(text) if text is not None else create_none_action()
                except ActionParsingError:
                    action = create_none_action()
                action["raw_prediction"] = text or ""
                self.actions.append(action)

        def next_action(self, trajectory, intent, meta_data):
            return self.actions.pop(0) if self.actions else create_stop_action("")

    class QuietRender(run.RenderHelper):
        def render(self, *args, **kwargs) -> None:
            pass

    run.ScriptBrowserEnv = RecordedEnv
    run.RenderHelper = QuietRender
    return RecordedAgent()


def run_one(run, agent, probe: Probe, key: str, trajectory: dict, workdir: Path) -> dict:
    import argparse

    args = argparse.Namespace(**BASE_ARGS, domain=trajectory["domain"], result_dir=str(workdir / "results"))
    agent.set_action_set_tag("id_accessibility_tree")
    probe.records.clear()
    try:
        run.test(args, agent, [key])
    except (
        ZeroDivisionError,
        UnboundLocalError,
    ):  # after the task's lines: the run's closing average of no score
        pass
    return summarize(probe.records)


BASE_ARGS = {
    "render": False,
    "slow_mo": 0,
    "action_set_tag": "id_accessibility_tree",
    "observation_type": "accessibility_tree",
    "current_viewport_only": True,
    "viewport_width": 1280,
    "viewport_height": 720,
    "save_trace_enabled": False,
    "sleep_after_execution": 0.0,
    "max_steps": 30,
    "parsing_failure_th": 3,
    "repeating_action_failure_th": 3,
    "provider": "openai",
    "caption": False,
    "caption_name": "captions.txt",
    "task_cnt": 0,
    "hop_cnt": 0,
    "render_screenshot": False,
}


def summarize(records: list[dict]) -> dict:
    result = {
        "outcome": "no_result",
        "error": None,
        "cnt_ans": None,
        "cnt_cl": None,
        "numerator": 0,
        "denominator": 0,
    }
    for record in records:
        message = record["message"]
        if message.startswith("[Result] (PASS)") or message.startswith("[Result] (FAIL)"):
            result["outcome"] = "pass" if "(PASS)" in message else "fail"
            result["cnt_ans"], result["cnt_cl"] = record["cnt_ans"], record["cnt_cl"]
        elif message.startswith("[Unhandled Error]"):
            result["error"] = message[len("[Unhandled Error] ") :].rstrip("]")
            result["cnt_ans"], result["cnt_cl"] = record["cnt_ans"], record["cnt_cl"]
        elif message.startswith("[Result] all success rate:"):
            numerator, denominator = message.split(":", 1)[1].strip().split("/")
            result["numerator"], result["denominator"] = int(numerator), int(denominator)
    return result


def main(argv: list[str]) -> int:
    checkout, corpus = Path(argv[1]).resolve(), json.loads(Path(argv[2]).read_text())
    workdir = Path(tempfile.mkdtemp(prefix="official-harness-"))
    (workdir / "results").mkdir()
    os.chdir(workdir)
    stdout, sys.stdout = sys.stdout, open(os.devnull, "w")  # the runner prints as it goes
    try:
        results = run_all(checkout, corpus, workdir)
    finally:
        sys.stdout = stdout
    json.dump(
        {"runner": "shulin16/MMInA@9b0a707 run.py test()", "results": results},
        sys.stdout,
        indent=1,
        sort_keys=True,
    )
    return 0


def run_all(checkout: Path, corpus: dict, workdir: Path) -> dict:
    run = load_runner(checkout)
    probe = Probe()
    logging.getLogger("logger").addHandler(probe)
    for handler in list(logging.getLogger("logger").handlers):
        if (
            isinstance(handler, logging.StreamHandler)
            and not isinstance(handler, logging.FileHandler)
            and handler is not probe
        ):
            logging.getLogger("logger").removeHandler(handler)
    trajectories, files = {}, {}
    for index, trajectory in enumerate(corpus["trajectories"]):
        path = workdir / "mmina" / trajectory["domain"] / f"{index + 1}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(trajectory["task"]))
        trajectories[str(path)] = trajectory
        files[trajectory["id"]] = str(path)
    agent = build(run, trajectories, workdir)
    return {t["id"]: run_one(run, agent, probe, files[t["id"]], t, workdir) for t in corpus["trajectories"]}


if __name__ == "__main__":
    sys.exit(main(sys.argv))
