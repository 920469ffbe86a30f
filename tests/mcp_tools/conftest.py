"""Shared helpers of the MCP tools' tests: the fake server's stdio entry."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

from tests.fakes.bot_process import ROOT


def fake_stdio(*args: str, **extra: Any) -> dict[str, Any]:
    """An ``mcp_servers`` entry that runs tests/fakes/mcp_server.py over stdio."""
    return {"command": sys.executable, "args": ["-m", "tests.fakes.mcp_server", *args], "cwd": str(ROOT),
            "timeout_seconds": 30, **extra}


async def until(check: Callable[[], bool], within: float = 30.0) -> None:
    """Wait until ``check()`` holds (it polls: a server process's state changes outside this loop's events)."""
    async with asyncio.timeout(within):
        while not check():  # noqa: ASYNC110
            await asyncio.sleep(0.02)
