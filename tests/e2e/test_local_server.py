"""End to end: ``python app.py`` pointed at a local server (the fake on loopback, speaking llama.cpp's and the
OpenAI protocol): the window is asked, logged and shown; endpoint mistakes are one line (DESIGN §2.2, §2.4).
Streams on the default path run against a real server in tests/e2e/test_real_model.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.bot_process import ROOT, clean_env
from tests.fakes.openai_server import FakeOpenAIServer


def run_app(tmp_path: Path, stdin: str, **config) -> subprocess.CompletedProcess:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"data_dir": "data", **config}), encoding="utf-8")
    return subprocess.run([sys.executable, str(ROOT / "app.py"), "--config", str(path)], input=stdin,
                          capture_output=True, text=True, timeout=60, cwd=tmp_path, env=clean_env())


@pytest.fixture
def local():
    with FakeOpenAIServer(model="smollm2") as srv:
        yield srv


def test_the_window_of_a_local_server_is_asked_logged_and_shown(tmp_path, local):
    local.discovery["/props"] = {"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1}
    local.enqueue_text("Hello from the local model.")
    proc = run_app(tmp_path, "hi\n/context\n", open_ai_api_base=local.base_url, model="smollm2")
    assert proc.returncode == 0, proc.stderr
    assert "INFO app: model smollm2: context window 4,096 tokens (from llama.cpp's /props)" in proc.stderr
    out = proc.stdout.splitlines()
    assert out[0] == "Hello from the local model."
    assert "Model window: 4,096 tokens (from llama.cpp's /props)" in out
    (chat,) = local.requests
    assert chat["max_tokens"] < 4096  # the answer cap stays within the window found
    assert "session terminal:local: ok in " in proc.stderr


def test_a_base_url_without_v1_gets_one_line(tmp_path, local):
    local.chat_prefix = "/v1/"
    base = local.base_url.removesuffix("/v1")
    proc = run_app(tmp_path, "hi\n", open_ai_api_base=base, model="smollm2")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"The model endpoint {base} answered 404 Not Found for /chat/completions: does open_ai_api_base in "
        "config.json end in /v1 (e.g. http://127.0.0.1:8080/v1)?"]
    assert "session terminal:local: error EndpointNotFoundError in " in proc.stderr


def test_an_unresolvable_host_gets_one_line_at_start_and_in_chat(tmp_path):
    base = "http://llama-box.invalid:8080/v1"  # never resolves (RFC 6761)
    proc = run_app(tmp_path, "hi\n", open_ai_api_base=base, model="smollm2")
    assert proc.returncode == 0, proc.stderr
    hint = (f"The host name 'llama-box.invalid' of the model endpoint {base} does not resolve: check "
            "open_ai_api_base in config.json for a typo, and the network.")
    assert proc.stdout.splitlines() == [hint]
    assert "Traceback" not in proc.stderr
