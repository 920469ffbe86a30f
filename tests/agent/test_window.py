"""Tests for agent/window.py: each discovery endpoint through the real SDK against the fake server on loopback,
the order of sources, and windows named by overflow errors."""

from __future__ import annotations

import logging

import pytest

from agent.llm import OpenAILLM
from agent.window import (
    CONFIGURED,
    DEFAULT,
    LOCAL_DEFAULT,
    OVERFLOW,
    TABLE,
    ModelWindows,
    Window,
    window_in_error,
)
from config.settings import Config, ConfigHolder
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.provider_errors import PROVIDER_ERRORS


@pytest.fixture
def fake():
    with FakeOpenAIServer(model="smollm2") as srv:
        yield srv


def windows(**settings) -> ModelWindows:
    return ModelWindows(ConfigHolder(Config(model="smollm2", **settings)))


async def discover(srv: FakeOpenAIServer, model: str = "smollm2", **settings) -> tuple[ModelWindows, Window | None]:
    found = windows(**settings)
    llm = OpenAILLM(api_key="", base_url=srv.base_url, model=model)
    try:
        return found, await found.discover(model, llm.server_json)
    finally:
        await llm.close()


# Answers of the real servers, trimmed to what matters and a neighbour or two.
LLAMACPP_PROPS = {"default_generation_settings": {"n_ctx": 4096, "params": {"n_predict": -1}}, "total_slots": 1,
                  "model_path": "/models/smollm2.gguf", "build_info": "b6000"}
VLLM_MODELS = {"object": "list", "data": [{"id": "smollm2", "object": "model", "owned_by": "vllm",
                                           "root": "HuggingFaceTB/SmolLM2-135M-Instruct", "max_model_len": 8192}]}
LMSTUDIO_MODELS = {"object": "list", "data": [
    {"id": "qwen2.5-7b-instruct", "type": "llm", "state": "not-loaded", "max_context_length": 32768},
    {"id": "smollm2", "type": "llm", "state": "loaded", "max_context_length": 8192,
     "loaded_context_length": 4096}]}
OLLAMA_PS = {"models": [{"name": "smollm2:latest", "model": "smollm2", "size": 1, "context_length": 8192}]}
OLLAMA_SHOW = {"parameters": "stop                           \"<|im_end|>\"\nnum_ctx                        2048",
               "model_info": {"general.architecture": "llama", "llama.context_length": 8192}}


@pytest.mark.parametrize(("path", "answer", "expected"), [
    ("/props", LLAMACPP_PROPS, Window(4096, "llama.cpp's /props")),
    ("/v1/models", VLLM_MODELS, Window(8192, "/v1/models max_model_len (vLLM, SGLang)")),
    ("/api/v0/models", LMSTUDIO_MODELS, Window(4096, "LM Studio's /api/v0/models")),
    ("/api/ps", OLLAMA_PS, Window(8192, "Ollama's /api/ps")),
    ("/api/show", OLLAMA_SHOW, Window(2048, "Ollama's /api/show num_ctx")),
    ("/api/show", {"parameters": "stop \"x\"", "model_info": {"qwen2.context_length": 32768}},
     Window(32768, "Ollama's /api/show model_info")),
])
async def test_each_discovery_endpoint(fake, path, answer, expected):
    fake.discovery[path] = answer
    found, window = await discover(fake)
    assert window == expected
    assert found.get("smollm2") == expected
    assert found("smollm2") == expected.tokens
    assert path in fake.paths


async def test_ollama_ps_wins_over_show_and_the_running_window_wins(fake):
    fake.discovery["/api/ps"] = OLLAMA_PS
    fake.discovery["/api/show"] = OLLAMA_SHOW
    _found, window = await discover(fake)
    assert window == Window(8192, "Ollama's /api/ps")


async def test_a_server_that_says_nothing_leaves_the_default_and_says_so(fake, caplog):
    # llama-cpp-python: /v1/models without a window, nothing else
    caplog.set_level(logging.WARNING, "agent.window")
    found, window = await discover(fake)
    assert window is None
    assert found.get("smollm2") == Window(128_000, DEFAULT)
    assert "the server did not say its context window; assuming 128000 tokens" in caplog.text
    assert {"/props", "/v1/models", "/api/v0/models", "/api/ps", "/api/show"} <= set(fake.paths)


async def test_nothing_is_asked_when_configured_or_known(fake):
    fake.discovery["/props"] = LLAMACPP_PROPS
    found, window = await discover(fake, model_context_window=16384)
    assert window is None and found.get("smollm2") == Window(16384, CONFIGURED)
    found, window = await discover(fake, model="qwen2.5-7b")
    assert window is None and found.get("qwen2.5-7b") == Window(131_072, TABLE)
    assert fake.paths == []


async def test_a_refused_endpoint_is_not_an_error_at_discovery():
    found = windows()
    llm = OpenAILLM(api_key="", base_url="http://127.0.0.1:9/v1", model="smollm2")
    try:
        assert await found.discover("smollm2", llm.server_json) is None
    finally:
        await llm.close()
    assert found("smollm2") == 128_000


@pytest.mark.parametrize(("name", "window"), [
    ("openai_overflow", 128000), ("vllm_overflow", 4096), ("vllm_overflow_new", 2048),
    ("vllm_engine_overflow", 2048), ("vllm_passed_overflow", 2048), ("llamacpp_overflow", 512),
    ("sglang_overflow", 4096), ("sglang_requested_overflow", 4096), ("sglang_input_overflow", 100),
    ("lmstudio_overflow", 7866),
    ("lmstudio_n_keep", 7424), ("deepseek_overflow", 65536), ("ollama_overflow", None),
])
def test_the_window_an_overflow_error_names(name, window):
    from agent.provider_errors import classify

    status, _headers, body = PROVIDER_ERRORS[name]
    assert window_in_error(str(classify(status, body))) == window


def test_an_overflow_teaches_a_smaller_window():
    found = windows()
    assert found.learn_from_error("smollm2", "This model's maximum context length is 2048 tokens.")
    assert found.get("smollm2") == Window(2048, OVERFLOW)
    assert not found.learn_from_error("smollm2", "This model's maximum context length is 4096 tokens.")
    assert not found.learn_from_error("smollm2", "prompt is too long")


def test_the_server_named_window_wins_over_a_larger_setting_and_the_log_says_so(caplog):
    # Issue 40: with model_context_window set larger, the overflow went straight to the fixed stages.
    caplog.set_level(logging.WARNING, "agent.window")
    configured = windows(model_context_window=4096)
    assert configured.learn_from_error("smollm2", "This model's maximum context length is 2048 tokens.")
    assert configured.get("smollm2") == Window(2048, OVERFLOW)
    assert configured("smollm2") == 2048
    assert ("the server's overflow error says the context window is 2048 tokens, but model_context_window in "
            "config.json is larger (4096)") in caplog.text
    # A setting smaller than the server's window stays: the user chose it.
    smaller = windows(model_context_window=1024)
    assert not smaller.learn_from_error("smollm2", "This model's maximum context length is 2048 tokens.")
    assert smaller.get("smollm2") == Window(1024, CONFIGURED)


async def test_a_local_server_that_says_nothing_is_assumed_small_until_told(fake, caplog):
    # Issue 40: llama-cpp-python says nothing about its window (default 2,048); the bot assumed 128,000.
    caplog.set_level(logging.WARNING, "agent.window")
    found, window = await discover(fake, open_ai_api_base=fake.base_url)
    assert window is None
    assert found.get("smollm2") == Window(2048, LOCAL_DEFAULT)
    assert "assuming 2048 tokens until an overflow error says otherwise" in caplog.text
    assert "if the server's window is larger" in caplog.text
    # what the server says, the table and the setting all win over the assumption
    assert found.learn_from_error("smollm2", "This model's maximum context length is 1024 tokens.")
    assert found.get("smollm2") == Window(1024, OVERFLOW)
    assert windows(open_ai_api_base=fake.base_url, model_context_window=8192).get("smollm2") == Window(8192, CONFIGURED)
    assert windows(open_ai_api_base=fake.base_url).get("qwen2.5-7b") == Window(131_072, TABLE)
    fake.discovery["/props"] = LLAMACPP_PROPS
    found, window = await discover(fake, open_ai_api_base=fake.base_url)
    assert found.get("smollm2") == Window(4096, "llama.cpp's /props")
    # a hosted endpoint keeps the hosted default
    assert windows(open_ai_api_base="https://api.example.com/v1").get("smollm2") == Window(128_000, DEFAULT)


@pytest.mark.parametrize(("name", "prompt"), [
    ("vllm_overflow", 4488), ("deepseek_overflow", 70321), ("llamacpp_overflow", 600), ("sglang_overflow", 5017),
    ("sglang_input_overflow", 150),
    ("vllm_overflow_new", 2301), ("vllm_passed_overflow", 2101), ("vllm_engine_overflow", 2301),
    ("lmstudio_overflow", 10136), ("openai_overflow", None), ("anthropic_overflow", None),
])
def test_the_prompt_count_an_overflow_error_gives(name, prompt):
    from agent.provider_errors import classify
    from agent.window import prompt_in_error

    status, _headers, body = PROVIDER_ERRORS[name]
    assert prompt_in_error(str(classify(status, body))) == prompt


def test_a_server_that_counts_more_tokens_scales_the_budgets():
    # llama-cpp-python's own words, for a request the bot counted as 1,800 tokens
    message = ("This model's maximum context length is 2048 tokens. However, you requested 2326 tokens (2070 in "
               "the messages, 256 in the completion). Please reduce the length of the messages or completion.")
    found = windows()
    assert found.learn_from_error("smollm2", message, sent=1800)
    assert found.get("smollm2") == Window(2048, OVERFLOW)  # what the server has, as shown
    assert found.ratio("smollm2") == pytest.approx(2070 / 1800 * 1.05)
    assert found("smollm2") == int(2048 / (2070 / 1800 * 1.05)) == 1696  # in the bot's own count
    assert not found.learn_from_error("smollm2", message, sent=1800)  # nothing new
    capped = windows()
    capped.learn_from_error("smollm2", message, sent=100)
    assert capped.ratio("smollm2") == 3.0
