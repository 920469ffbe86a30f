"""mcp_tools/server.py against real MCP servers: the FastMCP fake over stdio and ``python -m mcp_server_time``."""

from __future__ import annotations

import asyncio
import sys

import pytest

from config.mcp_servers import McpServerConfig
from core.retry import RetryPolicy
from mcp_tools.server import FAILED, RUNNING, STARTING, McpServer
from tests.fakes.mcp_server import serve_http
from tests.mcp_tools.conftest import fake_stdio, until

QUICK = RetryPolicy(attempts=None, first=0.05, cap=0.2, jitter=False)


async def test_tools_are_listed_filtered_and_a_changed_list_is_listed_again(tmp_path) -> None:
    changes: list[int] = []
    server = McpServer("fake", McpServerConfig.model_validate(fake_stdio(tools={"deny": ["crash", "hang"]})),
                       log_dir=tmp_path, on_tools=lambda: changes.append(1))
    assert server.state == STARTING
    server.start()
    try:
        await server.started()
        assert server.state == RUNNING
        assert [t.name for t in server.tools] == ["echo", "add", "token_check", "picture", "fail", "grow"]
        assert await server.call("echo", {"text": "x"}) == "echo: x"
        assert await server.call("grow", {}) == "grew"
        await until(lambda: "grown" in [t.name for t in server.tools])
        assert await server.call("grown", {}) == "grown"
        assert (server.calls, server.failed_calls) == (3, 0)
    finally:
        await server.stop()
    assert server.tools == [] and len(changes) >= 3


async def test_a_crash_withdraws_the_tools_and_the_server_comes_back(tmp_path) -> None:
    server = McpServer("fake", McpServerConfig.model_validate(fake_stdio()), log_dir=tmp_path, policy=QUICK)
    server.start()
    try:
        await server.started()
        assert await server.call("crash", {}) == "Error: the MCP server 'fake' closed the connection during crash."
        assert server.failed_calls == 1 and server.errors[-1].text.endswith("during crash")
        await until(lambda: server.restarts >= 1 and server.state == RUNNING)
        assert await server.call("echo", {"text": "again"}) == "echo: again"
    finally:
        await server.stop()


async def test_a_server_that_exits_at_start_fails_and_is_retried(tmp_path) -> None:
    server = McpServer("broken", McpServerConfig.model_validate(fake_stdio("--exit-at-start")), log_dir=tmp_path,
                       policy=QUICK)
    server.start()
    try:
        await server.started()
        assert server.state == FAILED and server.tools == []
        await until(lambda: server.restarts >= 2)
        assert await server.call("echo", {}) == "Error: the MCP server 'broken' is failed now; try again later."
    finally:
        await server.stop()
    assert "refusing to start" in (tmp_path / "broken.log").read_text(encoding="utf-8")  # its stderr, not ours


async def test_a_call_past_the_timeout_is_an_error_the_model_reads(tmp_path) -> None:
    server = McpServer("fake", McpServerConfig.model_validate(fake_stdio()), log_dir=tmp_path)
    server.start()
    try:
        await server.started()
        server.config = server.config.model_copy(update={"timeout_seconds": 0.5})
        assert await server.call("hang", {}) == "Error: the MCP server 'fake' did not answer hang within 0.5 s."
        assert server.state == RUNNING and await server.call("echo", {"text": "1"}) == "echo: 1"
    finally:
        await server.stop()


async def test_a_call_cancelled_with_its_turn_leaves_the_server_running(tmp_path) -> None:
    server = McpServer("fake", McpServerConfig.model_validate(fake_stdio()), log_dir=tmp_path)
    server.start()
    try:
        await server.started()
        turn = asyncio.create_task(server.call("hang", {}))
        await asyncio.sleep(0.3)
        turn.cancel()
        try:
            await turn
        except asyncio.CancelledError:
            pass
        assert turn.cancelled()
        assert server.state == RUNNING and await server.call("echo", {"text": "2"}) == "echo: 2"
    finally:
        await server.stop()


async def test_the_published_time_server_started_as_a_user_would() -> None:
    cfg = McpServerConfig.model_validate({"command": sys.executable,
                                          "args": ["-m", "mcp_server_time", "--local-timezone", "Europe/Berlin"]})
    server = McpServer("time", cfg)
    server.start()
    try:
        await server.started()
        assert [t.name for t in server.tools] == ["get_current_time", "convert_time"]
        text = await server.call("convert_time", {"source_timezone": "Europe/Berlin", "time": "12:00",
                                                  "target_timezone": "Asia/Tokyo"})
        assert '"time_difference": "+8.0h"' in text or '"time_difference": "+7.0h"' in text
    finally:
        await server.stop()


@pytest.mark.parametrize("sse", [False, True], ids=["streamable http", "sse"])
async def test_a_server_over_http_with_headers(sse) -> None:
    proc, url = serve_http(sse=sse)
    try:
        cfg = McpServerConfig.model_validate({"url": url, "headers": {"Authorization": "Bearer t0ken-for-the-test"},
                                              **({"transport": "sse"} if sse else {}), "timeout_seconds": 10})
        server = McpServer("web", cfg)
        server.start()
        try:
            await server.started()
            assert server.state == RUNNING and len(server.tools) == 8
            assert await server.call("add", {"a": 1, "b": 2}) == '{\n  "sum": 3\n}'
        finally:
            await server.stop()
    finally:
        proc.terminate()
        proc.wait(10)


async def test_a_server_that_never_answers_at_start_fails_within_its_timeout(tmp_path, caplog) -> None:
    cfg = McpServerConfig.model_validate({"command": sys.executable, "args": ["-c", "import time; time.sleep(600)"],
                                          "timeout_seconds": 0.5})
    server = McpServer("mute", cfg, log_dir=tmp_path, policy=QUICK.but(first=30.0, cap=30.0))
    server.start()
    try:
        await server.started()
        assert server.state == FAILED
        assert server.errors[-1].text == "no answer within its timeout_seconds"
    finally:
        await server.stop()
    [line] = [r.getMessage() for r in caplog.records if r.name == "mcp_tools.server"]
    assert line == ("mcp server mute failed to start: no answer within its timeout_seconds; its tools are "
                    "withdrawn; restarting in 30 s")


async def test_a_command_that_does_not_exist_is_one_clear_line(tmp_path, caplog) -> None:
    cfg = McpServerConfig.model_validate({"command": "no-such-mcp-server-program"})
    server = McpServer("missing", cfg, log_dir=tmp_path, policy=QUICK.but(first=30.0, cap=30.0))
    server.start()
    try:
        await server.started()
        assert server.state == FAILED
    finally:
        await server.stop()
    [line] = [r.getMessage() for r in caplog.records if r.name == "mcp_tools.server"]
    assert line.startswith("mcp server missing failed to start: ") and "no-such-mcp-server-program" in line
