"""A graceful stop (issue 29 items 6 and 7), through ``python app.py``: what the last summaries wrote is indexed
before the database closes, and a Ctrl-C that waits for a summary says so, and a second one stops at once."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pexpect

from summaries.text import SUMMARY_SYSTEM_PROMPT
from tests.e2e.test_secrets import spawn_terminal
from tests.e2e.test_terminal import expect
from tests.fakes.bot_process import clean_env

ROOT = Path(__file__).resolve().parents[2]


class SlowSummaries:
    """Answers summary requests after ``delay`` s (until released), chat requests with the default echo."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.release = threading.Event()
        self.asked = threading.Event()

    def __call__(self, body):
        if body["messages"][0]["content"] != SUMMARY_SYSTEM_PROMPT:
            return None
        self.asked.set()
        self.release.wait(self.delay)
        return "- the user said one and two"


def chunks(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT source, text FROM memory_chunks ORDER BY id").fetchall()


def test_what_the_last_summary_wrote_is_indexed_before_the_store_closes(tmp_path, openai_server):
    slow = openai_server.responder = SlowSummaries(1.5)  # it finishes during the stop
    # the default embedding model ("local") loads on first use, in a worker thread: the race of issue 29
    (tmp_path / "config.json").write_text(json.dumps({
        "open_ai_api_base": openai_server.base_url, "open_ai_api_key": "k", "data_dir": "data",
        "agent_max_context_turns": 1, "timezone": "UTC"}), encoding="utf-8")
    done = subprocess.run([sys.executable, str(ROOT / "app.py")], input="one\ntwo\n", capture_output=True, text=True,
                          timeout=90, cwd=tmp_path, env=clean_env())
    assert done.returncode == 0, done.stderr
    assert slow.asked.is_set()
    log = (tmp_path / "data" / "bot.log").read_text(encoding="utf-8")
    assert "indexing failed" not in log and "store is not open" not in log
    (daily,) = (tmp_path / "data" / "memory" / "terminal_local").glob("*.md")
    assert "- the user said one and two" in daily.read_text(encoding="utf-8")
    assert (daily.name, "the user said one and two") in chunks(tmp_path / "data" / "chatbot.db")


def test_ctrl_c_says_it_waits_for_a_summary_and_a_second_one_stops_now(tmp_path, openai_server):
    slow = openai_server.responder = SlowSummaries(60)
    child = spawn_terminal(tmp_path, open_ai_api_base=openai_server.base_url, open_ai_api_key="k",
                           agent_max_context_turns=1, timezone="UTC", memory_embedding_model="")
    try:
        expect(child, "you>")
        child.send("one\r")
        expect(child, "bot> echo: one\r\n")
        child.send("two\r")
        expect(child, "bot> echo: two\r\n")
        assert slow.asked.wait(20), "the trim asked for a summary"
        expect(child, "you>")
        child.sendcontrol("c")
        expect(child, "stopping…", timeout=5)
        expect(child, r"stopping: waiting up to 10 s for 1 summary to finish; press Ctrl-C again to stop now "
                      r"\(they resume at the next start\)", timeout=5)
        child.sendcontrol("c")
        expect(child, "stopping now: what is unfinished resumes at the next start", timeout=5)
        expect(child, pexpect.EOF, timeout=10)  # the summary would have taken 60 s
    finally:
        child.close(force=True)
        slow.release.set()
    assert child.exitstatus == 0
    assert not list((tmp_path / "data" / "memory").glob("*/*.md"))
    # the next start runs the summary cut short
    slow.delay = 0
    done = subprocess.run([sys.executable, str(ROOT / "app.py"), "--config", str(tmp_path / "config.json")], input="",
                          capture_output=True, text=True, timeout=60, cwd=tmp_path, env=clean_env())
    assert done.returncode == 0, done.stderr
    (daily,) = (tmp_path / "data" / "memory" / "terminal_local").glob("*.md")
    assert "- the user said one and two" in daily.read_text(encoding="utf-8")


async def test_every_part_stops_through_the_lifecycle_in_one_declared_order(tmp_path, caplog):
    """``App`` (bootstrap/runner.py) registers every part's stop on its one ``Lifecycle``: what :meth:`declare_stops`
    made, the channels as they start, the replies in progress, then what starts after "ready"; a stop runs them
    last first, and the database closes last."""
    import asyncio
    import logging

    from bootstrap.runner import App
    from config.settings import load_config
    from tests.e2e.test_telegram import settings
    from tests.fakes.openai_server import FakeOpenAIServer
    from tests.fakes.telegram_api import FakeTelegramAPI

    with FakeTelegramAPI() as api, FakeOpenAIServer() as llm:
        path = tmp_path / "config.json"
        path.write_text(json.dumps({**settings(api, llm), "web_console_port": 0}), encoding="utf-8")
        app = App(path)
        run = asyncio.create_task(app.run(load_config(path, environ={})))
        try:
            async with asyncio.timeout(30):
                while "model endpoint probe" not in app.lifecycle.started:  # noqa: ASYNC110 - nothing to await
                    await asyncio.sleep(0.05)
            started = list(app.lifecycle.started)
            store = app.services.store
        finally:
            with caplog.at_level(logging.INFO):
                app.request_stop()
                await asyncio.wait_for(run, 30)
    assert started == ["database", "locks", "cleanup's last batch", "model client", "plugins' last work", "summaries",
                       "intake journal", "channel telegram", "replies in progress", "config watcher", "mcp servers",
                       "mcp servers starting", "leadership",
                       "cleanup", "reminders", "restore ahead", "model endpoint probe"]
    assert app.lifecycle.started == [] and store.database is None  # all stopped, the database closed
    lines = [(r.name, r.getMessage()) for r in caplog.records if r.name in ("app", "store.engine")]
    assert lines[-1] == ("app", "stopped") and lines[-2][0] == "store.engine"  # the database closes last
