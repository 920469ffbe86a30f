"""MCP tools end to end (DESIGN §13): app.py on Telegram (fake Bot API, fake OpenAI server) with real MCP servers:
the FastMCP fake of tests/fakes/mcp_server.py over stdio and over Streamable HTTP, and the published
``mcp-server-time`` started as a user would (``python -m mcp_server_time``)."""

from __future__ import annotations

import http.cookiejar
import json
import re
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from agent.tokens import TokenCounters
from tests.e2e.test_telegram import settings, wait_chat
from tests.fakes.bot_process import ROOT, BotProcess
from tests.fakes.cluster import free_port
from tests.fakes.mcp_server import serve_http
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_api import FakeTelegramAPI

ADMIN, OTHER = 1001, 2002
ENV_SECRET = "mcp-env-secret-7f3a9c2e41d8"
CONSOLE_PASSWORD = "console-password-for-the-mcp-test"
CONSOLE_PORT = free_port()
HEADER_SECRET = "mcp-header-secret-b6d1e0a9c3f5"


def http_server(*args: str):
    """The fake MCP server over Streamable HTTP in its own process, and its URL."""
    return serve_http(*args)


@pytest.fixture(scope="module")
def servers():
    with FakeTelegramAPI() as api, FakeOpenAIServer() as llm:
        yield api, llm


@pytest.fixture(scope="module")
def http_mcp():
    proc, url = http_server()
    yield url
    proc.terminate()
    proc.wait(10)


def stdio(*args: str, **extra):
    return {"command": sys.executable, "args": ["-m", "tests.fakes.mcp_server", *args], "cwd": str(ROOT), **extra}


@pytest.fixture(scope="module")
def bot(servers, http_mcp, tmp_path_factory):
    api, llm = servers
    mcp_servers = {
        "fake": stdio(env={"FAKE_MCP_TOKEN": ENV_SECRET}, timeout_seconds=20),
        "web": {"url": http_mcp, "headers": {"Authorization": f"Bearer {HEADER_SECRET}"}, "timeout_seconds": 2},
        "time": {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]},
        "broken": stdio("--exit-at-start"),
    }
    proc = BotProcess(tmp_path_factory.mktemp("mcp"), **settings(
        api, llm, admin_users=[f"telegram:{ADMIN}"], mcp_servers=mcp_servers, web_console_port=CONSOLE_PORT,
        web_console_password=CONSOLE_PASSWORD)).start()
    for name in ("fake", "web", "time"):
        proc.wait_for_log(f"mcp server {name}: running", timeout=60)
    yield proc
    servers = children(proc.pid)
    assert len(servers) >= 2  # fake and time (broken may be between tries)
    assert proc.stop() == 0
    assert [pid for pid in servers if Path(f"/proc/{pid}").exists()] == []  # the stdio servers stopped with it
    log = proc.log()
    assert "Traceback" not in log
    assert "mcp server broken failed to start" in log and "mcp server fake: running" in log
    (proc.folder / "last.log").write_text(log, encoding="utf-8")


def console_pages(*paths: str) -> dict[str, str]:
    """The web console's pages as an admin sees them, after logging in with the password."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    base = f"http://127.0.0.1:{CONSOLE_PORT}"
    login = opener.open(base + "/login", timeout=10).read().decode()
    csrf = re.search(r'name="csrf" value="([^"]*)"', login).group(1)
    form = urllib.parse.urlencode({"csrf": csrf, "next": "/", "secret": CONSOLE_PASSWORD}).encode()
    opener.open(base + "/login", data=form, timeout=10).read()
    return {path: opener.open(base + path, timeout=10).read().decode() for path in paths}


def children(pid: int | None) -> list[int]:
    """The child processes of ``pid`` (the stdio servers the bot started)."""
    assert pid is not None
    return [int(c) for task in Path(f"/proc/{pid}/task").iterdir() for c in (task / "children").read_text().split()]


def ask(api, llm, chat, text, user=None):
    """Send ``text`` and wait for the reply; return the model requests the turn made."""
    before = len(llm.requests)
    shown = len(api.chat_texts(chat))
    api.push_text(chat, text, user_id=user or chat)
    wait_chat(api, chat, lambda texts: len(texts) > shown, timeout=30)
    return llm.requests[before:]


def tool_names(request):
    return [t["function"]["name"] for t in request.get("tools") or []]


def tool_results(request):
    """The tool results of the turn the request answers (after its last user message)."""
    messages = request["messages"]
    last_user = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    return [m["content"] for m in messages[last_user:] if m.get("role") == "tool"]


def test_a_tool_of_each_transport_is_called_and_its_result_is_in_the_next_request(servers, bot):
    api, llm = servers
    llm.enqueue_tool_calls([("fake__echo", '{"text": "over stdio"}'), ("web__add", '{"a": 2, "b": 40}'),
                            ("time__get_current_time", '{"timezone": "UTC"}')])
    llm.enqueue_text("all three answered")
    requests = ask(api, llm, ADMIN, "use the tools")
    assert api.chat_texts(ADMIN)[-1] == "all three answered"
    offered = tool_names(requests[0])
    assert {"fake__echo", "web__add", "time__get_current_time", "current_time"} <= set(offered)
    assert not any(name.startswith("broken__") for name in offered)
    results = tool_results(requests[1])
    assert results[0] == "echo: over stdio"
    assert json.loads(results[1]) == {"sum": 42}
    assert json.loads(results[2])["timezone"] == "UTC"


def test_tools_lists_the_servers_with_their_state(servers, bot):
    api, llm = servers
    api.push_text(ADMIN, "/tools", user_id=ADMIN)
    texts = wait_chat(api, ADMIN, lambda t: t[-1].startswith("Tools for this chat"))
    lines = texts[-1].splitlines()
    assert "fake: running (8 tools): echo, add, token_check, picture, fail, hang, crash, grow" in lines
    assert "time: running (2 tools): get_current_time, convert_time" in lines
    assert any(line.startswith("broken: failed (0 tools)") or line.startswith("broken: starting (0 tools)")
               for line in lines)


def test_a_chat_outside_chats_never_sees_the_stdio_servers_tools(servers, bot):
    api, llm = servers
    requests = ask(api, llm, OTHER, "hello")
    offered = tool_names(requests[0])
    assert "web__echo" in offered  # a URL server serves every chat by default
    assert not any(name.startswith(("fake__", "time__")) for name in offered)
    llm.enqueue_tool_calls([("fake__echo", '{"text": "sneaky"}')])
    llm.enqueue_text("ok")
    requests = ask(api, llm, OTHER, "call it anyway")
    assert tool_results(requests[1])[0].startswith("Error: LookupError: unknown tool 'fake__echo'")
    api.push_text(OTHER, "/tools", user_id=OTHER)
    texts = wait_chat(api, OTHER, lambda t: t[-1].startswith("Tools for this chat"))
    assert "web: running" in texts[-1] and "fake:" not in texts[-1] and "time:" not in texts[-1]


def test_results_errors_and_a_server_that_never_answers(servers, bot):
    api, llm = servers
    llm.enqueue_tool_calls([("web__picture", "{}"), ("web__fail", "{}"), ("web__hang", "{}")])
    llm.enqueue_text("answered anyway")
    requests = ask(api, llm, ADMIN, "pictures, failures and waiting")
    assert api.chat_texts(ADMIN)[-1] == "answered anyway"
    picture, fail, hang = tool_results(requests[1])
    assert picture == ("[image: image/png, 70 bytes, not shown to the model]\n"
                       "[resource link: file:///docs/report.pdf (report.pdf): the quarterly report]")
    assert fail.startswith("Error: ") and "fail" in fail
    assert hang == "Error: the MCP server 'web' did not answer hang within 2 s."


def test_a_server_that_crashes_mid_call_is_restarted_and_the_others_go_on(servers, bot):
    api, llm = servers
    llm.enqueue_tool_calls([("fake__crash", "{}")])
    llm.enqueue_text("it crashed")
    requests = ask(api, llm, ADMIN, "crash it")
    assert tool_results(requests[1]) == ["Error: the MCP server 'fake' closed the connection during crash."]
    bot.wait_for_log("mcp server fake stopped: the connection closed; its tools are withdrawn; restarting in")
    # meanwhile the other servers answer
    llm.enqueue_tool_calls([("web__echo", '{"text": "still here"}')])
    llm.enqueue_text("fine")
    requests = ask(api, llm, ADMIN, "and the web one?")
    assert tool_results(requests[1]) == ["echo: still here"]
    deadline = time.monotonic() + 60
    while bot.log().count("mcp server fake: running") < 2:
        assert time.monotonic() < deadline, bot.log()
        time.sleep(0.1)
    llm.enqueue_tool_calls([("fake__echo", '{"text": "back"}')])
    llm.enqueue_text("back again")
    requests = ask(api, llm, ADMIN, "is it back?")
    assert tool_results(requests[1]) == ["echo: back"]


def test_a_server_that_exits_at_start_is_one_line_and_retried(servers, bot):
    deadline = time.monotonic() + 30
    while bot.log().count("mcp server broken failed to start") < 2:
        assert time.monotonic() < deadline, bot.log()
        time.sleep(0.1)
    line = next(line for line in bot.log().splitlines() if "mcp server broken failed to start" in line)
    assert "WARNING mcp_tools.server" in line and "restarting in" in line
    assert line.endswith("(details in bot.log)")
    assert "Traceback" not in bot.log()  # the console has the line; the log file has the details
    log_file = (Path(bot.folder) / "data" / "bot.log").read_text(encoding="utf-8")
    assert "Traceback" in log_file[log_file.index("mcp server broken failed to start"):]


def test_the_env_secret_reaches_the_server_and_nothing_else(servers, bot):
    api, llm = servers
    llm.enqueue_tool_calls([("fake__token_check", "{}")])
    llm.enqueue_text("checked")
    requests = ask(api, llm, ADMIN, "is the token there?")
    assert tool_results(requests[1]) == [f"token: {len(ENV_SECRET)} characters"]
    pages = console_pages("/tools", "/config")
    assert "fake: running (8 tools)" in pages["/tools"] and "Last errors of broken" in pages["/tools"]
    assert "FAKE_MCP_TOKEN" in pages["/config"] and "…41d8" in pages["/config"]
    api.push_text(ADMIN, "/config mcp_servers", user_id=ADMIN)
    texts = wait_chat(api, ADMIN, lambda t: t[-1].startswith("mcp_servers = "))
    assert '"FAKE_MCP_TOKEN": "…41d8"' in texts[-1]
    data = Path(bot.folder) / "data"
    places = [bot.log(), (data / "bot.log").read_text(encoding="utf-8"), "\n".join(api.chat_texts(ADMIN)),
              json.dumps(llm.requests), *pages.values()]
    places += [p.read_bytes().decode("utf-8", "replace") for p in data.glob("chatbot.db*")]
    for secret in (ENV_SECRET, HEADER_SECRET):
        assert not any(secret in text for text in places)


# --- many tools, a small window ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def own_servers():
    with FakeTelegramAPI() as api, FakeOpenAIServer() as llm:
        yield api, llm


@pytest.fixture(scope="module")
def many_bot(own_servers, tmp_path_factory):
    api, llm = own_servers
    proc_mcp, url = http_server("--many", "100")
    proc = BotProcess(tmp_path_factory.mktemp("mcp-many"), **settings(
        api, llm, mcp_servers={"many": {"url": url}}, model_context_window=4096, web_console_port=0,
        agent_max_context_tokens=1000)).start()
    proc.wait_for_log("mcp server many: running (108 tools)", timeout=60)
    yield proc
    assert proc.stop() == 0
    proc_mcp.terminate()
    proc_mcp.wait(10)


def test_100_tools_on_a_4096_token_window_offer_the_relevant_ones_within_the_share(own_servers, many_bot):
    api, llm = own_servers
    chat = 3003
    llm.enqueue_tool_calls([("find_tools", '{"query": "weather forecast for a city"}')])
    llm.enqueue_text("found it")
    requests = ask(api, llm, chat, "Please convert 20 euros into dollars")
    assert api.chat_texts(chat)[-1] == "found it"
    counter = TokenCounters()("gpt-4o-mini")
    first, second = requests[0], requests[1]
    offered = tool_names(first)
    assert "many__convert_currency" in offered and "find_tools" in offered
    assert len(offered) < 40
    for request in (first, second):
        tools_tokens = counter.count_text(json.dumps(request["tools"]))
        assert tools_tokens <= 0.15 * 4096
        # the prompt (counted generously, as JSON) leaves room for an answer in the window
        prompt = counter.count_text(json.dumps(request["messages"])) + tools_tokens
        assert prompt <= 4096 - 1024, prompt
    # find_tools named the match and it is offered from the next call
    found = tool_results(second)[0]
    assert "many__tool_000: Look up weather forecast for a city." in found
    assert "many__tool_000" in tool_names(second)
