"""End to end: ``python app.py`` pointed at a local server (the fake on loopback, speaking llama.cpp's and the
OpenAI protocol): the window is asked, logged and shown; endpoint mistakes are one line (DESIGN §2.2, §2.4).
Streams on the default path run against a real server in tests/e2e/test_real_model.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.bot_process import ROOT, clean_env, database_from_template
from tests.fakes.openai_server import FakeOpenAIServer


def run_app(tmp_path: Path, stdin: str, **config) -> subprocess.CompletedProcess:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"data_dir": "data", **config}), encoding="utf-8")
    database_from_template(path)  # a migrated empty database: these tests are about the model's window
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


def test_a_local_server_that_says_nothing_is_assumed_small_and_context_counts_the_schemas(tmp_path, local):
    # Issue 40: llama-cpp-python says nothing about its window (its default is 2,048); the bot assumed 128,000
    # and /context said "1% used" while the server counted 82%: the tools' schemas were not shown.
    local.enqueue_text("Hello from the local model.")
    proc = run_app(tmp_path, "hi\n/context\n", open_ai_api_base=local.base_url, model="smollm2")
    assert proc.returncode == 0, proc.stderr
    assert "the server did not say its context window; assuming 2048 tokens" in proc.stderr
    out = proc.stdout.splitlines()
    assert out[0] == "Hello from the local model."
    assert "Model window: 2,048 tokens (from the default for a local server that does not say its window)" in out
    (schemas,) = [line for line in out if line.startswith("Tools' schemas: ~")]
    tools_tokens = int(schemas.split("~")[1].split()[0].replace(",", ""))
    assert tools_tokens > 300  # the built-in tools' schemas, sent with every request
    (tokens,) = [line for line in out if line.startswith("Tokens")]
    used = int(tokens.split("(")[1].split()[0].replace(",", ""))
    assert used > tools_tokens  # counted as used, with the system prompt and the turns
    (chat,) = local.requests
    assert chat["max_tokens"] < 2048  # the answer cap stays within the window assumed


def test_an_overflow_naming_a_window_smaller_than_the_setting_is_fitted_to_it(tmp_path, local):
    # Issue 40: with model_context_window set larger, the overflow went straight to the fixed stages.
    local.enqueue_provider_error("vllm_overflow_new")  # "This model's maximum context length is 2048 tokens."
    local.enqueue_text("Fitted.")
    proc = run_app(tmp_path, "hi\n/context\n", open_ai_api_base=local.base_url, model="smollm2",
                   model_context_window=8192)
    assert proc.returncode == 0, proc.stderr
    assert ("the server's overflow error says the context window is 2048 tokens, but model_context_window in "
            "config.json is larger (8192); fitting to the server's 2048") in proc.stderr
    assert "still too long" not in proc.stderr
    out = proc.stdout.splitlines()
    assert out[0] == "Fitted."
    assert "Model window: 2,048 tokens (from the server's overflow error)" in out
    first, second = [body for body in local.requests if "tools" in body]  # the replies (not the summary)
    assert first["max_tokens"] > 2048 > second["max_tokens"]


def test_sglangs_overflow_is_recognised_and_fitted_to(tmp_path, local):
    # Issue 40: "The input (150 tokens) is longer than the model's context length (100 tokens)." (SGLang, 400)
    local.enqueue_provider_error("sglang_input_overflow")
    local.enqueue_text("Fitted.")
    proc = run_app(tmp_path, "hi\n", open_ai_api_base=local.base_url, model="smollm2")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["Fitted."]
    assert "the model rejected the context as too long: The input (150 tokens)" in proc.stderr
    assert "the server's overflow error says the context window is 100 tokens" in proc.stderr
