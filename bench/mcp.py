"""MCP tools (DESIGN §13): what the servers cost the bot, with the FastMCP fake of tests/fakes/mcp_server.py.

1. Start and stop: seconds from :meth:`McpManager.start` until every server is running, for 1 and for 5 stdio
   servers (they start in parallel), and the stop of all 5.
2. Added latency per tool call: milliseconds of one ``echo`` call through the agent's :class:`Tool` (the SDK's
   client, the transport, the server's handling), over stdio and Streamable HTTP; the function itself runs in
   microseconds, so this is what MCP adds to a turn per call.
3. Memory: the bot process's RSS added per connected client (5 stdio clients, then 5 HTTP clients), and a stdio
   server's own process (which the bot starts and which runs beside it).

Each figure is the median over ``--rounds`` rounds (the machine is shared and noisy).
Run: ``python bench/mcp.py [--rounds 5] [--calls 200]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# run as a script, bench/ is first on the path, and this file would stand in for the SDK's ``mcp`` package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agent.tools.base import ToolContext  # noqa: E402
from config.settings import ConfigHolder, validate_data  # noqa: E402
from core.records import SessionInfo  # noqa: E402
from mcp_tools.manager import McpManager  # noqa: E402
from tests.fakes.mcp_server import serve_http  # noqa: E402

CHAT = SessionInfo("telegram:1", "telegram", "1", "1")


def rss_kb(pid: int | str = "self") -> int:
    """Resident memory of a process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def children() -> list[int]:
    """The direct child processes of this process."""
    out: list[int] = []
    for task in Path("/proc/self/task").iterdir():
        text = (task / "children").read_text().split()
        out.extend(int(p) for p in text)
    return out


def stdio(n: int) -> dict:
    return {f"s{i}": {"command": sys.executable, "args": ["-m", "tests.fakes.mcp_server"], "cwd": str(ROOT),
                      "chats": ["*"], "timeout_seconds": 60} for i in range(n)}


def http(urls: list[str]) -> dict:
    return {f"h{i}": {"url": url, "timeout_seconds": 60} for i, url in enumerate(urls)}


async def start_stop(n: int) -> tuple[float, float]:
    mgr = McpManager(ConfigHolder(validate_data({"mcp_servers": stdio(n)})))
    began = time.perf_counter()
    await mgr.start()
    started = time.perf_counter() - began
    assert all(s.state == "running" for s in mgr.servers.values()), mgr.lines()
    began = time.perf_counter()
    await mgr.stop()
    return started, time.perf_counter() - began


async def call_ms(servers: dict, calls: int) -> list[float]:
    mgr = McpManager(ConfigHolder(validate_data({"mcp_servers": servers})))
    await mgr.start()
    try:
        tool = next(t for t in mgr.tools_for(CHAT) if t.name.endswith("__echo"))
        ctx = ToolContext(session_id=CHAT.session_id, config=mgr.config())
        for _ in range(20):  # warm-up
            await tool.call(ctx, {"text": "warm"})
        out = []
        for i in range(calls):
            began = time.perf_counter()
            text = await tool.call(ctx, {"text": f"call {i}"})
            out.append((time.perf_counter() - began) * 1000)
            assert text == f"echo: call {i}", text
        return out
    finally:
        await mgr.stop()


async def memory(servers: dict) -> tuple[float, float]:
    """(KiB of this process per client, KiB of one server process)"""
    before = rss_kb()
    known = set(children())
    mgr = McpManager(ConfigHolder(validate_data({"mcp_servers": servers})))
    await mgr.start()
    try:
        await asyncio.sleep(0.5)
        per_client = (rss_kb() - before) / len(servers)
        spawned = [p for p in children() if p not in known]
        own = statistics.median(rss_kb(p) for p in spawned) if spawned else 0.0
        return per_client, own
    finally:
        await mgr.stop()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    procs, urls = [], []
    for _ in range(5):
        proc, url = serve_http()
        procs.append(proc)
        urls.append(url)
    try:
        # memory first, before the other rounds grow the heap
        mem_stdio = await memory(stdio(5))
        mem_http = await memory(http(urls))
        one, five, stop5 = [], [], []
        stdio_ms, http_ms = [], []
        for _ in range(args.rounds):
            one.append((await start_stop(1))[0])
            started, stopped = await start_stop(5)
            five.append(started)
            stop5.append(stopped)
            stdio_ms.extend(await call_ms(stdio(1), args.calls))
            http_ms.extend(await call_ms(http(urls[:1]), args.calls))
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)

    def q(values: list[float], p: float) -> float:
        return statistics.quantiles(values, n=100)[int(p) - 1]

    load = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} cores, load average {load:.1f}; rounds {args.rounds}, calls {args.calls}")
    print("| figure | value |")
    print("|---|---|")
    print(f"| start, 1 stdio server (median) | {statistics.median(one):.2f} s |")
    print(f"| start, 5 stdio servers in parallel (median) | {statistics.median(five):.2f} s |")
    print(f"| stop, 5 stdio servers (median) | {statistics.median(stop5):.2f} s |")
    print(f"| added latency per call, stdio (median / p90) | {statistics.median(stdio_ms):.2f} / "
          f"{q(stdio_ms, 90):.2f} ms |")
    print(f"| added latency per call, Streamable HTTP (median / p90) | {statistics.median(http_ms):.2f} / "
          f"{q(http_ms, 90):.2f} ms |")
    print(f"| bot RSS per client, stdio | {mem_stdio[0] / 1024:.1f} MiB |")
    print(f"| bot RSS per client, Streamable HTTP | {mem_http[0] / 1024:.1f} MiB |")
    print(f"| one stdio server's own process (the FastMCP fake) | {mem_stdio[1] / 1024:.1f} MiB |")


if __name__ == "__main__":
    asyncio.run(main())
