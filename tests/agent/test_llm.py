"""Tests for agent/llm.py: error classification and retries, against a real loopback HTTP server."""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent.llm import OpenAILLM
from agent.provider_errors import is_overflow
from core.errors import (
    AuthLLMError,
    ContextOverflowError,
    EndpointNotFoundError,
    EndpointRefusedError,
    ModelNotFoundError,
    OtherLLMError,
    TransientLLMError,
)
from core.retry import MODEL_CALL


class Script:
    """Responses to serve, in order: (status, body, headers); a body is JSON, or bytes sent as they are.
    Each request's path and headers are recorded."""

    def __init__(self, *responses):
        self.responses = list(responses)
        self.calls = 0
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []


def ok_body(text="hi"):
    return {"id": "x", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


@pytest.fixture
def server():
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            script.calls += 1
            script.paths.append(self.path)
            script.headers.append({k.lower(): v for k, v in self.headers.items()})
            status, body, headers = script.responses.pop(0)
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    script.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    yield script
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def err(status, message, code=None):
    return {"error": {"message": message, "type": "invalid_request_error", "code": code}}


async def test_retries_500_then_succeeds(server):
    server.responses += [(500, err(500, "boom"), None), (503, err(503, "busy"), None), (200, ok_body("done"), None)]
    llm = OpenAILLM(api_key="k", base_url=server.url, model="m", retry_base_delay=0.01)
    try:
        resp = await llm.complete([{"role": "user", "content": "x"}])
    finally:
        await llm.close()
    assert resp.content == "done"
    assert server.calls == 3


async def test_gives_up_after_three_tries(server):
    server.responses += [(500, err(500, "boom"), None)] * 3
    llm = OpenAILLM(api_key="k", base_url=server.url, model="m", retry_base_delay=0.01)
    try:
        with pytest.raises(TransientLLMError):
            await llm.complete([{"role": "user", "content": "x"}])
    finally:
        await llm.close()
    assert server.calls == 3


async def test_429_honours_retry_after():
    sleeps = []

    async def fake_sleep(seconds):
        sleeps.append(seconds)

    attempts = []

    async def call():
        attempts.append(1)
        if len(attempts) < 3:
            raise TransientLLMError("rate limited", status=429, retry_after=7.0)
        return "ok"

    retrying = MODEL_CALL.retrying(lambda exc: isinstance(exc, TransientLLMError), sleep=fake_sleep)
    assert await retrying(call) == "ok"
    assert sleeps == [7.0, 7.0]


async def test_429_over_http_reads_retry_after(server):
    server.responses += [(429, err(429, "slow down"), {"Retry-After": "0.05"}), (200, ok_body(), None)]
    llm = OpenAILLM(api_key="k", base_url=server.url, model="m", retry_base_delay=5)
    try:
        assert (await llm.complete([{"role": "user", "content": "x"}])).content == "hi"
    finally:
        await llm.close()
    assert server.calls == 2


async def test_classification(server):
    server.responses += [
        (400, err(400, "too long", "context_length_exceeded"), None),
        (400, err(400, "This model's maximum context length is 8192 tokens"), None),
        (400, err(400, "Invalid value for 'temperature'"), None),
        (401, err(401, "Incorrect API key"), None),
        (429, err(429, "Request too large: maximum context length"), {"Retry-After": "0"}),
    ]
    llm = OpenAILLM(api_key="k", base_url=server.url, model="m", retry_base_delay=0.01)
    try:
        with pytest.raises(ContextOverflowError):
            await llm.complete([{"role": "user", "content": "x"}])
        with pytest.raises(ContextOverflowError):
            await llm.complete([{"role": "user", "content": "x"}])
        with pytest.raises(OtherLLMError):  # a generic 400 is never an overflow
            await llm.complete([{"role": "user", "content": "x"}])
        with pytest.raises(AuthLLMError):
            await llm.complete([{"role": "user", "content": "x"}])
        server.responses += [(429, err(429, "slow"), None)] * 2
        with pytest.raises(TransientLLMError):  # a rate limit is never an overflow
            await llm.complete([{"role": "user", "content": "x"}])
    finally:
        await llm.close()


async def test_error_bodies_of_other_compatible_servers(server):
    server.responses += [
        (404, {"error": "model 'llama9' not found, try pulling it first"}, None),  # Ollama's native shape
        (400, {"detail": "Invalid request"}, None),  # FastAPI-based servers
        (400, {"error": {"message": "bad value", "code": 123}}, None),
        (400, {"object": "error", "message": "This model's maximum context length is 4096 tokens"}, None),  # vLLM
        (502, b"<html><body>Bad Gateway</body></html>", None),
        (502, b"<html><body>Bad Gateway</body></html>", None),
        (502, b"<html><body>Bad Gateway</body></html>", None),
    ]
    llm = OpenAILLM(api_key="k", base_url=server.url, model="m", retry_base_delay=0.01)
    messages = [{"role": "user", "content": "x"}]
    try:
        with pytest.raises(ModelNotFoundError) as missing:
            await llm.complete(messages)
        with pytest.raises(OtherLLMError) as detail:
            await llm.complete(messages)
        with pytest.raises(OtherLLMError) as numbered:
            await llm.complete(messages)
        with pytest.raises(ContextOverflowError):
            await llm.complete(messages)
        with pytest.raises(TransientLLMError) as gateway:
            await llm.complete(messages)
    finally:
        await llm.close()
    assert (str(missing.value), missing.value.status, missing.value.model) == (
        "model 'llama9' not found, try pulling it first", 404, "m")
    assert str(detail.value) == "Invalid request"
    assert str(numbered.value) == "bad value"
    assert (gateway.value.status, str(gateway.value)) == (502, "<html><body>Bad Gateway</body></html>")
    assert server.calls == 7


async def test_headers_and_url(server):
    server.responses += [(200, ok_body(), None), (200, ok_body(), None)]
    with_key = OpenAILLM(api_key="sk-test", base_url=server.url + "/", model="m")
    without = OpenAILLM(api_key="", base_url=server.url, model="m")
    try:
        await with_key.complete([{"role": "user", "content": "x"}])
        await without.complete([{"role": "user", "content": "x"}])
    finally:
        await with_key.close()
        await without.close()
    assert server.paths == ["/v1/chat/completions"] * 2
    first, second = server.headers
    assert first["authorization"] == "Bearer sk-test"
    assert first["content-type"] == "application/json"
    assert server.headers[0]["x-stainless-retry-count"] == "0"  # the SDK's own headers, its retries off
    assert "authorization" not in second  # a local server needs no key, so none is sent


async def test_unreachable_endpoint_is_transient_and_retried():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    llm = OpenAILLM(api_key="k", base_url=f"http://127.0.0.1:{port}/v1", model="m", retry_base_delay=0.01)
    try:
        # aiohttp reports a refused connection as a connect timeout; the cause chain says it was refused
        with pytest.raises(EndpointRefusedError, match="refused the connection") as raised:
            await llm.complete([{"role": "user", "content": "x"}])
        assert isinstance(raised.value, TransientLLMError)
    finally:
        await llm.close()


async def test_timeout_is_transient():
    from tests.fakes.openai_server import FakeOpenAIServer

    with FakeOpenAIServer() as srv:
        srv.latency = 2.0
        llm = OpenAILLM(api_key="k", base_url=srv.base_url, model="m", timeout=0.2, retry_base_delay=0.01)
        try:
            with pytest.raises(TransientLLMError, match="timed out"):
                await llm.complete([{"role": "user", "content": "x"}])
        finally:
            await llm.close()
        assert len(srv.requests) == 3


async def test_proxy_from_the_environment(server, monkeypatch):
    server.responses += [(200, ok_body("via proxy"), None)]
    proxy = server.url.rsplit("/v1", 1)[0]
    for name in ("HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy)
    # The host does not exist: only the proxy (our server) can answer.
    llm = OpenAILLM(api_key="k", base_url="http://model.invalid/v1", model="m")
    try:
        assert (await llm.complete([{"role": "user", "content": "x"}])).content == "via proxy"
    finally:
        await llm.close()
    assert server.paths == ["http://model.invalid/v1/chat/completions"]


def test_is_overflow_rules():
    assert is_overflow(400, "context_length_exceeded", "")
    assert is_overflow(400, None, "prompt is too long: 210000 tokens > 200000 maximum")
    assert not is_overflow(429, "context_length_exceeded", "maximum context length")
    assert not is_overflow(400, None, "Invalid 'messages[1].content': string too long")


def test_backoff_delay_grows_and_caps():
    assert 0.25 <= MODEL_CALL.delay(1, None) <= 0.5
    assert 1.0 <= MODEL_CALL.delay(3, None) <= 2.0
    assert MODEL_CALL.delay(10, None) <= 20.0
    assert MODEL_CALL.delay(1, 3.0) == 3.0


async def test_request_body_and_parsed_answer():
    from tests.fakes.openai_server import FakeOpenAIServer

    tools = [{"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}]
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "héllo"}]
    with FakeOpenAIServer() as srv:
        srv.required_api_key = "k"
        srv.enqueue_tool_calls([("now", '{"tz": "UTC"}')], content="let me look")
        llm = OpenAILLM(api_key="k", base_url=srv.base_url, model="m")
        try:
            resp = await llm.complete(messages, tools=tools, temperature=0.5)
            plain = await llm.complete(messages, model="other")
        finally:
            await llm.close()
        first, second = srv.requests
    assert first == {"model": "m", "messages": messages, "tools": tools, "temperature": 0.5, "max_tokens": 4096}
    assert second == {"model": "other", "messages": messages, "max_tokens": 4096}
    assert resp.content == "let me look"
    assert [(c.name, c.arguments) for c in resp.tool_calls] == [("now", '{"tz": "UTC"}')]
    assert resp.tool_calls[0].id.startswith("call_")
    assert resp.finish_reason == "tool_calls"
    assert resp.usage.prompt_tokens >= 1 and resp.usage.completion_tokens >= 1
    assert (plain.content, plain.tool_calls, plain.finish_reason) == ("echo: héllo", (), "stop")


def test_parse_completion_edge_cases():
    from agent.completion import parse_completion

    with pytest.raises(OtherLLMError, match="no choices"):
        parse_completion({"choices": []})
    with pytest.raises(OtherLLMError, match="JSON"):
        parse_completion("not json")
    with pytest.raises(TransientLLMError):  # a proxy's page with status 200
        parse_completion("<html>gateway</html>")
    text = json.dumps(ok_body("from text"))
    assert parse_completion(text).content == "from text"
    resp = parse_completion({"choices": [{"message": {"content": None, "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": None}}]}}]})
    assert [(c.id, c.name, c.arguments) for c in resp.tool_calls] == [("a", "f", "{}")]
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens, resp.finish_reason) == (0, 0, None)


# --- real providers' error bodies, through the real SDK against the fake server ---------------------------

from agent.provider_errors import classify, retry_after  # noqa: E402
from core.errors import QuotaLLMError, ToolsUnsupportedError  # noqa: E402
from tests.fakes.openai_server import FakeOpenAIServer  # noqa: E402
from tests.fakes.provider_errors import PROVIDER_ERRORS  # noqa: E402

#: What each recorded body must become. Transient ones are retried (the next answer succeeds).
EXPECTED = {
    "openai_overflow": ContextOverflowError, "openai_overflow_new": ContextOverflowError,
    "azure_overflow": ContextOverflowError, "deepseek_overflow": ContextOverflowError,
    "vllm_overflow": ContextOverflowError, "vllm_overflow_new": ContextOverflowError,
    "llamacpp_overflow": ContextOverflowError, "ollama_overflow": ContextOverflowError,
    "sglang_overflow": ContextOverflowError, "lmstudio_overflow": ContextOverflowError,
    "openrouter_overflow": ContextOverflowError, "openrouter_nested_overflow": ContextOverflowError,
    "groq_overflow": ContextOverflowError, "together_overflow": ContextOverflowError,
    "gemini_overflow": ContextOverflowError, "anthropic_overflow": ContextOverflowError,
    "dashscope_overflow": ContextOverflowError, "moonshot_overflow": ContextOverflowError,
    "zhipu_overflow": ContextOverflowError, "siliconflow_overflow": ContextOverflowError,
    "vllm_engine_overflow": ContextOverflowError, "vllm_passed_overflow": ContextOverflowError,
    "ollama_012_overflow": ContextOverflowError, "ollama_native_overflow": ContextOverflowError,
    "sglang_requested_overflow": ContextOverflowError, "sglang_value_error": ContextOverflowError,
    "sglang_input_overflow": ContextOverflowError,
    "lmstudio_n_keep": ContextOverflowError, "lmstudio_mid_generation": ContextOverflowError,
    "anthropic_compat_overflow": ContextOverflowError, "nginx_413": ContextOverflowError,
    "llamacpp_404": EndpointNotFoundError, "ollama_404": EndpointNotFoundError, "vllm_404": EndpointNotFoundError,
    "lmstudio_bad_endpoint": EndpointNotFoundError,
    "openai_tpm": TransientLLMError, "groq_tpm": TransientLLMError, "azure_rate": TransientLLMError,
    "gemini_rate": TransientLLMError, "openrouter_upstream_rate": TransientLLMError,
    "anthropic_overloaded": TransientLLMError, "proxy_html": TransientLLMError, "error_in_200": TransientLLMError,
    "openai_quota": QuotaLLMError, "deepseek_balance": QuotaLLMError, "moonshot_suspended": QuotaLLMError,
    "zhipu_arrears": QuotaLLMError, "openrouter_credits": QuotaLLMError, "dashscope_arrearage": QuotaLLMError,
    "openai_auth": AuthLLMError, "gemini_auth": AuthLLMError, "moonshot_auth": AuthLLMError,
    "openai_model": ModelNotFoundError, "ollama_model": ModelNotFoundError, "azure_deployment": ModelNotFoundError,
    "zhipu_model": ModelNotFoundError,
    "vllm_no_auto_tools": ToolsUnsupportedError, "ollama_no_tools": ToolsUnsupportedError,
    "openai_invalid": OtherLLMError,
}


def test_every_recorded_body_has_an_expectation():
    assert set(EXPECTED) == set(PROVIDER_ERRORS)


@pytest.fixture(scope="module")
def fake():
    with FakeOpenAIServer() as srv:
        yield srv


@pytest.mark.parametrize("name", sorted(PROVIDER_ERRORS))
async def test_provider_error_classified_through_the_sdk(fake, name):
    fake.reset()
    expected = EXPECTED[name]
    fake.enqueue_provider_error(name)
    llm = OpenAILLM(api_key="k", base_url=fake.base_url, model="the-model", retry_base_delay=0.01)
    try:
        if expected is TransientLLMError:
            fake.enqueue_text("after the retry")
            assert (await llm.complete([{"role": "user", "content": "x"}])).content == "after the retry"
            assert len(fake.requests) == 2
            return
        if expected is ToolsUnsupportedError:  # the client asks again without tools
            tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
            fake.enqueue_text("no tools needed")
            assert (await llm.complete([{"role": "user", "content": "x"}], tools=tools)).content == "no tools needed"
            first, second = fake.requests
            assert "tools" in first and "tools" not in second
            assert llm.no_tools == {"the-model"}
            return
        with pytest.raises(expected) as info:
            await llm.complete([{"role": "user", "content": "x"}])
    finally:
        await llm.close()
    assert len(fake.requests) == 1  # never retried
    assert type(info.value) is expected
    if expected is ModelNotFoundError:
        assert info.value.model == "the-model"


def test_messages_come_from_the_most_specific_place():
    status, _headers, body = PROVIDER_ERRORS["openrouter_nested_overflow"]
    assert str(classify(status, body)) == "prompt is too long: 210631 tokens > 200000 maximum"
    status, _headers, body = PROVIDER_ERRORS["proxy_html"]
    assert str(classify(status, body)) == "502 Bad Gateway"
    error = classify(*PROVIDER_ERRORS["zhipu_overflow"][::2])
    assert (error.code, str(error)) == ("1261", "Prompt exceeds max length")


def test_rate_limits_are_never_overflow_even_with_overflow_words():
    body = '{"error":{"message":"Request too large: maximum context length","code":"rate_limit_exceeded"}}'
    assert type(classify(429, body)) is TransientLLMError
    assert type(classify(413, PROVIDER_ERRORS["groq_tpm"][2])) is TransientLLMError


def test_retry_after_forms():
    assert retry_after({"retry-after": "7"}) == 7.0
    assert retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, now=1445412480.0) == 10.0
    assert retry_after({"retry-after": "soon"}) is None
    assert retry_after({}) is None
    gemini = classify(429, PROVIDER_ERRORS["gemini_rate"][2])
    assert gemini.retry_after == 0.2
    assert classify(429, PROVIDER_ERRORS["openai_tpm"][2], PROVIDER_ERRORS["openai_tpm"][1]).retry_after == 0.12


async def test_retry_after_beyond_the_deadline_is_not_waited(fake):
    fake.reset()
    fake.enqueue_error(429, "slow down", code="rate_limit_exceeded", headers={"Retry-After": "30"})
    llm = OpenAILLM(api_key="k", base_url=fake.base_url, model="m", deadline=5)
    try:
        started = time.monotonic()
        with pytest.raises(TransientLLMError) as info:
            await llm.complete([{"role": "user", "content": "x"}])
    finally:
        await llm.close()
    assert time.monotonic() - started < 2
    assert (info.value.retry_after, len(fake.requests)) == (30.0, 1)


async def test_quota_is_not_retried_and_says_so(fake):
    fake.reset()
    fake.enqueue_provider_error("openai_quota")
    llm = OpenAILLM(api_key="k", base_url=fake.base_url, model="m", retry_base_delay=0.01)
    try:
        with pytest.raises(QuotaLLMError, match="exceeded your current quota"):
            await llm.complete([{"role": "user", "content": "x"}])
    finally:
        await llm.close()
    assert len(fake.requests) == 1


# --- streaming, through the real SDK -------------------------------------------------------------------


async def test_stream_text_tool_calls_and_usage(fake):
    fake.reset()
    fake.enqueue_response({"id": "s", "object": "chat.completion", "created": 1, "model": "m", "choices": [{
        "index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "reasoning_content": "thinking hard",
            "content": "<think>hidden</think>A streamed answer in many pieces."}}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}})
    fake.enqueue_tool_calls([("lookup", '{"query": "long arguments here"}')])
    pieces: list[str] = []

    async def on_text(piece: str) -> None:
        pieces.append(piece)

    llm = OpenAILLM(api_key="k", base_url=fake.base_url, model="m")
    try:
        text = await llm.stream([{"role": "user", "content": "x"}], on_text=on_text)
        calls = await llm.stream([{"role": "user", "content": "y"}], tools=[{"type": "function", "function": {
            "name": "lookup", "parameters": {"type": "object"}}}])
    finally:
        await llm.close()
    assert "".join(pieces) == "A streamed answer in many pieces."
    assert len(pieces) > 2 and all("hidden" not in p for p in pieces)
    assert (text.content, text.reasoning_content, text.finish_reason) == (
        "A streamed answer in many pieces.", "thinking hard\n\nhidden", "stop")
    assert (text.usage.prompt_tokens, text.usage.completion_tokens) == (11, 7)
    assert [(c.name, c.arguments) for c in calls.tool_calls] == [("lookup", '{"query": "long arguments here"}')]
    assert calls.finish_reason == "tool_calls"
    first = fake.requests[0]
    assert (first["stream"], first["stream_options"], first["max_tokens"]) == (True, {"include_usage": True}, 4096)


async def test_stream_errors_are_classified(fake):
    fake.reset()
    fake.enqueue_provider_error("llamacpp_overflow")
    llm = OpenAILLM(api_key="k", base_url=fake.base_url, model="m")
    try:
        with pytest.raises(ContextOverflowError):
            await llm.stream([{"role": "user", "content": "x"}])
    finally:
        await llm.close()


async def test_azure_deployment_url_and_key_header(fake):
    fake.reset()
    llm = OpenAILLM(api_key="az-key", base_url=fake.base_url.removesuffix("/v1"), model="my-deploy",
                    azure_api_version="2024-10-21")
    try:
        assert (await llm.complete([{"role": "user", "content": "x"}])).content == "echo: x"
    finally:
        await llm.close()
    assert fake.paths[-1] == "/openai/deployments/my-deploy/chat/completions?api-version=2024-10-21"
    assert fake.request_headers[-1]["api-key"] == "az-key"


def test_o_series_and_gpt5_get_max_completion_tokens():
    from agent.llm import token_param

    assert [token_param(m) for m in ("o3-mini", "gpt-5", "openai/o1", "gpt-4o", "deepseek-chat")] == [
        "max_completion_tokens", "max_completion_tokens", "max_completion_tokens", "max_tokens", "max_tokens"]


def test_think_filter_handles_split_tags():
    from agent.completion import ThinkFilter, split_think

    f = ThinkFilter()
    out = "".join(f.feed(p) for p in ["<thi", "nk>secret</th", "ink>\n\nvis", "ible <", "b>bold</b>"]) + f.flush()
    assert out == "visible <b>bold</b>"
    assert split_think("reasoning</think>answer") == ("answer", "reasoning")
    assert split_think("a <think>x</think>b") == ("a b", "x")


def test_parse_completion_answer_shapes():
    from agent.completion import parse_completion

    parts = parse_completion({"choices": [{"message": {"content": [{"type": "text", "text": "a"},
                                                                   {"type": "text", "text": "b"}]}}]})
    assert parts.content == "ab"
    broken = parse_completion({"choices": [{"message": {"content": None, "tool_calls": [
        {"id": "t", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]}}]})
    (call,) = broken.tool_calls
    assert (call.arguments, call.error.startswith("the arguments were not valid JSON")) == ("{}", True)
    with pytest.raises(ContextOverflowError):  # Zhipu answers "too long" with a 200
        parse_completion({"choices": [{"message": {"content": ""}, "finish_reason": "model_context_window_exceeded"}]})
