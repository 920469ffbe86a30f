"""End to end, memory that holds only what people said and finds what is in the files: app.py with the fakes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.bot_process import clean_env
from tests.fakes.openai_server import FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[2]


def run_app(config_path: Path, stdin: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "app.py"), "--config", str(config_path)], input=stdin,
                          capture_output=True, text=True, timeout=timeout, cwd=config_path.parent, env=clean_env())


def write_config(tmp_path: Path, **values) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(values), encoding="utf-8")
    return path


@pytest.fixture
def openai_server():
    with FakeOpenAIServer() as srv:
        yield srv


def inventing_summariser(body):
    """Summaries that quote the user twice: once truly, once with words nobody wrote."""
    from summaries.text import SUMMARY_SYSTEM_PROMPT

    if body["messages"][0]["content"] == SUMMARY_SYSTEM_PROMPT:
        return ("- the user counted messages\nUser: I'm going to the beach.\n"
                '- 用户说：“我明天去北京”\n- The user said "message 2"')
    return None


def test_a_summary_never_puts_words_in_the_users_mouth(tmp_path, openai_server):
    openai_server.responder = inventing_summariser
    openai_server.latency = 0.05
    path = write_config(tmp_path, open_ai_api_base=openai_server.base_url, open_ai_api_key="k",
                        agent_max_context_turns=4, data_dir="data", timezone="UTC")
    proc = run_app(path, "".join(f"message {i}\n" for i in range(1, 9)))
    assert proc.returncode == 0, proc.stderr
    [memory] = list((tmp_path / "data" / "memory" / "terminal_local").glob("????-??-??.md"))
    text = memory.read_text(encoding="utf-8")
    assert "- the user counted messages" in text and '- The user said "message 2"' in text
    assert "beach" not in text and "北京" not in text
    summaries = [r for r in openai_server.requests if not r.get("tools")]
    assert summaries, "the summariser ran"
    log = (tmp_path / "data" / "bot.log").read_text(encoding="utf-8")
    assert "line(s) quoting what no user said dropped" in log
