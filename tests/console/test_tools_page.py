"""console/tools_page.py: every MCP server's line, reach, chats, calls and last errors, and never a secret."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import aiohttp

from agent.tools.base import ToolRegistry
from agent.tools.current_time import current_time
from config.settings import ConfigHolder, validate_data
from console.site import web_console
from mcp_tools.manager import McpManager
from tests.console.conftest import free_port
from tests.mcp_tools.conftest import fake_stdio

SECRET = "page-secret-0123456789abcdef"


@dataclass
class Parts:
    """What the tools page uses."""

    config: ConfigHolder
    tools: ToolRegistry
    mcp: McpManager


async def test_the_page_shows_each_server_with_its_calls_and_errors_and_no_secret(tmp_path: Path) -> None:
    holder = ConfigHolder(validate_data({
        "data_dir": str(tmp_path), "web_console_port": free_port(), "timezone": "UTC",
        "mcp_servers": {"fake": fake_stdio(env={"FAKE_MCP_TOKEN": SECRET}), "off": fake_stdio(enabled=False)}}))
    mcp = McpManager(holder)
    await mcp.start()
    console = web_console(Parts(holder, ToolRegistry([current_time]), mcp))
    try:
        server = mcp.servers["fake"]
        assert await server.call("token_check", {}) == f"token: {len(SECRET)} characters"
        assert (await server.call("fail", {})).startswith("Error: ")
        server.config = server.config.model_copy(update={"timeout_seconds": 0.3})
        await server.call("hang", {})
        assert await console.start() is True
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            async with http.get(console.url(), allow_redirects=False) as response:  # the token logs in
                assert response.status == 303
            async with http.get(console.url().split("?")[0] + "tools") as response:
                page = await response.text()
                assert response.status == 200
    finally:
        await console.stop()
        await mcp.stop()
    assert "current_time" in page
    assert "fake: running (8 tools): echo, add, token_check, picture, fail, hang, crash, grow" in page
    assert "off: disabled (0 tools)" in page
    assert "admins&#39; private chats" in page or "admins' private chats" in page
    row = page[page.index("fake: running"):page.index("off: disabled")]
    assert '<td class="num" data-label="Calls">3</td>' in row and '<td class="num" data-label="Failed">2</td>' in row
    assert "Last errors of fake (UTC)" in page and "did not answer hang within 0.3 s" in page
    assert SECRET not in page
