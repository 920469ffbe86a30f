"""mcp_tools/manager.py: which chats may use which server, tool names, and following config.json edits, with real
servers."""

from __future__ import annotations

from config.settings import Config, ConfigHolder, validate_data
from core.records import SessionInfo
from dispatcher.admins import Admins
from mcp_tools.manager import McpManager, tool_name
from mcp_tools.server import McpServer
from tests.mcp_tools.conftest import fake_stdio, until

PRIVATE_ADMIN = SessionInfo("telegram:1", "telegram", "1", "1")
PRIVATE_OTHER = SessionInfo("telegram:2", "telegram", "2", "2")
GROUP_MEMBER = SessionInfo("telegram:group:-100:1", "telegram", "-100", "1", is_group=True)
OTHER_GROUP = SessionInfo("telegram:group:-200", "telegram", "-200", "", is_group=True)


class NoStore:
    """Admins read no grants in these tests."""

    async def admin_grants(self) -> set[str]:
        return set()


def manager(servers: dict) -> McpManager:
    holder = ConfigHolder(validate_data({"admin_users": ["telegram:1"], "mcp_servers": servers}))
    return McpManager(holder, Admins(NoStore(), holder))  # type: ignore[arg-type]


def test_tool_names_are_namespaced_and_what_the_api_accepts() -> None:
    assert tool_name("time", "get_current_time") == "time__get_current_time"
    assert tool_name("docs", "search.pages v2") == "docs__search_pages_v2"
    assert len(tool_name("s" * 30, "t" * 80)) == 64


def test_who_may_use_a_server() -> None:
    mgr = manager({"local": {"command": "x"}, "remote": {"url": "http://h/mcp"},
                   "listed": {"command": "x", "chats": ["telegram:group:-100", "telegram:2"]},
                   "everyone": {"command": "x", "chats": ["*"]}})
    cfg = mgr.config()
    servers = {name: McpServer(name, entry) for name, entry in cfg.mcp_servers.items()}
    allowed = {name: [s.session_id for s in (PRIVATE_ADMIN, PRIVATE_OTHER, GROUP_MEMBER, OTHER_GROUP)
                      if mgr.may_use(server, s)] for name, server in servers.items()}
    assert allowed == {
        "local": ["telegram:1"],  # a program on this machine: the admins' private chats only
        "remote": ["telegram:1", "telegram:2", "telegram:group:-100:1", "telegram:group:-200"],
        "listed": ["telegram:2", "telegram:group:-100:1"],  # a group entry covers its members' sessions
        "everyone": ["telegram:1", "telegram:2", "telegram:group:-100:1", "telegram:group:-200"],
    }
    assert not mgr.may_use(servers["remote"], None)


async def test_servers_start_together_and_follow_config_edits(tmp_path) -> None:
    mgr = manager({"a": fake_stdio(chats=["*"]), "b": fake_stdio(chats=["*"], tools={"allow": ["echo"]}),
                   "off": fake_stdio(enabled=False)})
    await mgr.start()
    try:
        assert mgr.lines() == ["a: running (8 tools): echo, add, token_check, picture, fail, hang, crash, grow",
                               "b: running (1 tool): echo", "off: disabled (0 tools)"]
        names = [t.name for t in mgr.tools_for(PRIVATE_OTHER)]
        assert names[:2] == ["a__echo", "a__add"] and names[-1] == "b__echo" and len(names) == 9
        b = mgr.servers["b"]
        cfg: Config = mgr.config()
        new = dict(cfg.mcp_servers)
        del new["a"]
        new["c"] = new["b"].model_copy(update={"tools": new["b"].tools.model_copy(update={"allow": ["add"]})})
        mgr.config.replace(cfg.model_copy(update={"mcp_servers": new}))
        await until(lambda: "c" in mgr.servers and mgr.servers["c"].state == "running" and "a" not in mgr.servers)
        assert mgr.servers["b"] is b  # unchanged: kept running
        assert [t.name for t in mgr.tools_for(PRIVATE_OTHER)] == ["b__echo", "c__add"]
    finally:
        await mgr.stop()
    assert mgr.servers == {} and mgr.tools_for(PRIVATE_OTHER) == []


def test_without_servers_the_sdk_and_numpy_are_never_imported() -> None:
    """The mcp SDK (about 20 MB and seconds of CPU) is imported only when a server is configured; numpy only once
    tools are ranked by their vectors (a fresh interpreter: this one has imported both)."""
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "import asyncio, sys\n"
        "from config.settings import ConfigHolder, validate_data\n"
        "from agent.tools.base import ToolRegistry\n"
        "from mcp_tools import install\n"
        "holder = ConfigHolder(validate_data({'memory_embedding_model': ''}))\n"
        "manager = install(holder, lambda key: False, ToolRegistry())\n"
        "async def main():\n"
        "    await manager.start()\n"
        "    await manager.stop()\n"
        "asyncio.run(main())\n"
        "loaded = sorted({'mcp', 'numpy', 'mcp_tools.server'} & set(sys.modules))\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).resolve().parents[2],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
