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


def summary_aware(body):
    """Answer summary requests with a bullet; leave chat requests to the default echo."""
    from memory.summary_text import SUMMARY_SYSTEM_PROMPT

    if body["messages"][0]["content"] == SUMMARY_SYSTEM_PROMPT:
        return "- the user counted messages"
    return None


def test_trimmed_turns_are_summarised_injected_and_saved(tmp_path, openai_server):
    openai_server.responder = summary_aware
    # A model that takes a moment, as real ones do: with instant answers the piped turns can all finish
    # before the background summary of the first trim is stored, and no request would carry it.
    openai_server.latency = 0.05
    path = write_config(tmp_path, open_ai_api_base=openai_server.base_url, open_ai_api_key="k",
                        agent_max_context_turns=4, data_dir="data", timezone="UTC")
    lines = "".join(f"message {i}\n" for i in range(1, 9))
    proc = run_app(path, lines)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"echo: message {i}" for i in range(1, 9)]
    chats = [r for r in openai_server.requests if r.get("tools")]
    summaries = [r for r in openai_server.requests if not r.get("tools")]
    assert summaries and all(r.get("temperature") == 0 for r in summaries)
    injected = [r for r in chats
                if next(m for m in r["messages"] if m["role"] == "user")["content"].startswith(
                    "[System: Previous conversation summary — ")]
    assert injected, "a later request carries the summary in its first user message"
    first_user = next(m for m in injected[-1]["messages"] if m["role"] == "user")["content"]
    assert "- the user counted messages\n\nThe recent conversation continues below.\n\n---\n\n" in first_user
    memory = list((tmp_path / "data" / "memory" / "terminal_local").glob("*.md"))
    assert len(memory) == 1
    text = memory[0].read_text(encoding="utf-8")
    assert text.startswith("# Daily Memory: ")
    assert "## Trimmed Context (" in text and "- the user counted messages" in text


def test_every_message_is_answered_under_a_small_context_limit(tmp_path, openai_server):
    openai_server.max_prompt_chars = 6_000
    path = write_config(tmp_path, open_ai_api_base=openai_server.base_url, open_ai_api_key="k", data_dir="data")
    lines = "".join(f"long message {i} " + "words " * 300 + "\n" for i in range(12))
    proc = run_app(path, lines)
    assert proc.returncode == 0, proc.stderr
    replies = proc.stdout.splitlines()
    assert len(replies) == 12
    assert all(r.startswith(f"echo: long message {i} ") for i, r in enumerate(replies))
    overflowed = [r for r in openai_server.requests
                  if sum(len(m.get("content") or "") for m in r["messages"]) > 6_000]
    assert overflowed, "the limit was actually hit and recovered from"
