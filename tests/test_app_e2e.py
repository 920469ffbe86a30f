"""End to end: ``python app.py`` as a subprocess, terminal channel piped, against the fake OpenAI server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.openai_server import FakeOpenAIServer

ROOT = Path(__file__).resolve().parent.parent
SECRET_VARS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "TELEGRAM_BOT_TOKEN")


def clean_env() -> dict[str, str]:
    """The environment without any real secrets or endpoints."""
    env = {k: v for k, v in os.environ.items() if k not in SECRET_VARS}
    env["PYTHONUNBUFFERED"] = "1"
    return env


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


def test_two_lines_two_replies_with_context(tmp_path, openai_server):
    path = write_config(tmp_path, open_ai_api_base=openai_server.base_url, open_ai_api_key="test-key",
                        data_dir="data")
    proc = run_app(path, "hello there\nwhat did I say?\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["echo: hello there", "echo: what did I say?"]
    assert "Traceback" not in proc.stderr
    second = openai_server.requests[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[1]["content"] == "hello there"
    assert second[2]["content"] == "echo: hello there"
    assert (tmp_path / "data" / "chatbot.db").exists()


def test_without_a_key_the_bot_explains_and_exits_cleanly(tmp_path):
    path = write_config(tmp_path, data_dir="data")
    proc = run_app(path, "hello\n")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "OPENAI_API_KEY" in out and "open_ai_api_key" in out and "open_ai_api_base" in out
    assert "Ollama" in out
    # the hint is printed at start and given as the answer to the message
    assert out.count("No model is configured") == 2
    assert "Traceback" not in proc.stderr


def test_a_bad_config_is_one_clear_line(tmp_path):
    path = write_config(tmp_path, agent_max_context_turn=3)
    proc = run_app(path, "")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("config error: unknown config key 'agent_max_context_turn'; "
                                   "did you mean agent_max_context_turns?")
