"""A real MCP server written with the SDK's ``MCPServer`` (FastMCP), for the MCP tools' tests.

Run as ``python -m tests.fakes.mcp_server [--http PORT | --sse PORT] [--exit-at-start] [--many N]``: over stdio
by default, over Streamable HTTP at ``http://127.0.0.1:PORT/mcp`` with ``--http``, over the older SSE transport at
``http://127.0.0.1:PORT/sse`` with ``--sse``. :func:`serve_http` runs it so for a test. Its tools:

- ``echo(text)``: ``echo: <text>``;
- ``add(a, b)``: the sum, as structured content too;
- ``token_check()``: whether ``FAKE_MCP_TOKEN`` reached it from ``env`` (its length, never its value);
- ``picture()``: a tiny PNG image and a resource link;
- ``fail()``: a tool error;
- ``hang()``: never answers;
- ``crash()``: the process exits in the middle of the call;
- ``grow()``: adds the tool ``grown`` and sends ``notifications/tools/list_changed``.

``--exit-at-start`` exits before speaking MCP (a server that cannot start). ``--many N`` adds N tools about
unrelated everyday things (``tool_000`` …), one of which, ``convert_currency``, converts money.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import sys

from mcp import types
from mcp.server.mcpserver import Context, MCPServer

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")

#: Subjects of the ``--many`` tools: each gets a description no other shares.
SUBJECTS = [
    "weather forecast for a city", "sunrise and sunset times", "tide tables of a harbour", "train departures",
    "flight status", "parcel tracking", "recipe search", "calorie counting", "wine pairing", "movie showtimes",
    "book reviews", "music lyrics", "podcast episodes", "football scores", "tennis rankings", "chess puzzles",
    "crossword hints", "dictionary definitions", "synonyms of a word", "translation of a phrase",
    "spelling check", "grammar check", "word count", "random jokes", "quotes of the day", "horoscopes",
    "moon phases", "star maps", "earthquake reports", "air quality index", "pollen levels", "traffic jams",
    "parking spaces", "fuel prices", "electric car chargers", "bike sharing stations", "bus routes",
    "museum opening hours", "library loans", "school holidays", "public holidays", "garbage collection days",
    "plant watering schedule", "pet vaccination dates", "vet appointments", "dentist appointments",
    "gym class timetable", "yoga poses", "running routes", "hiking trails", "ski slope conditions",
    "surf forecast", "fishing licences", "hunting seasons", "bird sightings", "mushroom identification",
    "tree species", "flower meanings", "paint colours", "furniture sizes", "room measurements",
    "mortgage rates", "tax brackets", "pension estimates", "insurance quotes", "credit scores",
    "stock quotes", "crypto wallets", "invoice drafts", "receipt scanning", "expense reports",
    "meeting rooms", "calendar invites", "email drafts", "contact cards", "password strength",
    "QR code generation", "URL shortening", "image resizing", "PDF merging", "zip archives",
    "file renaming", "disk usage", "CPU temperature", "wifi speed", "printer status", "battery health",
    "screen brightness", "keyboard layouts", "font pairing", "emoji search", "unit conversion of lengths",
    "time zones of cities", "country capitals", "population statistics", "flag descriptions",
    "volcano activity", "lottery results", "concert tickets", "hotel availability",
]


def build(many: int = 0) -> MCPServer:
    """The server and its tools."""
    mcp = MCPServer("fake")

    @mcp.tool()
    def echo(text: str) -> str:
        """Echo the text back."""
        return f"echo: {text}"

    @mcp.tool()
    def add(a: int, b: int) -> dict:
        """Add two whole numbers."""
        return {"sum": a + b}

    @mcp.tool()
    def token_check() -> str:
        """Say whether the token from the configuration arrived."""
        token = os.environ.get("FAKE_MCP_TOKEN", "")
        return f"token: {len(token)} characters" if token else "token: missing"

    @mcp.tool()
    def picture() -> list:
        """A picture and a link to a document."""
        return [types.ImageContent(type="image", data=base64.b64encode(PNG).decode(), mime_type="image/png"),
                types.ResourceLink(type="resource_link", uri="file:///docs/report.pdf", name="report.pdf",
                                   description="the quarterly report")]

    @mcp.tool()
    def fail() -> str:
        """Always fails."""
        raise ValueError("this tool always fails")

    @mcp.tool()
    async def hang() -> str:
        """Never answers."""
        await asyncio.sleep(3600)
        return "late"

    @mcp.tool()
    def crash() -> str:
        """The server exits during this call."""
        os._exit(3)

    @mcp.tool()
    async def grow(ctx: Context) -> str:
        """Add the tool 'grown' and tell the client."""
        @mcp.tool(name="grown")
        def grown() -> str:
            """A tool added while running."""
            return "grown"
        await ctx.session.send_tool_list_changed()
        return "grew"

    for i in range(many):
        if i == many // 2:
            @mcp.tool(name="convert_currency")
            def convert_currency(amount: float, source: str, target: str) -> str:
                """Convert an amount of money from one currency to another (euros, dollars, yen, pounds)."""
                return f"{amount} {source} = {amount * 2} {target}"
            continue
        subject = SUBJECTS[i % len(SUBJECTS)]

        def make(subject: str = subject):
            def lookup(query: str) -> str:
                return f"{subject}: nothing found for {query}"
            return lookup

        mcp.add_tool(make(), name=f"tool_{i:03d}", description=f"Look up {subject}.")
    return mcp


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=0)
    parser.add_argument("--sse", type=int, default=0)
    parser.add_argument("--exit-at-start", action="store_true")
    parser.add_argument("--many", type=int, default=0)
    args = parser.parse_args()
    if args.exit_at_start:
        sys.exit("fake MCP server: refusing to start")
    server = build(args.many)
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    elif args.sse:
        server.run("sse", host="127.0.0.1", port=args.sse)
    else:
        server.run()


if __name__ == "__main__":
    main()


def serve_http(*args: str, sse: bool = False):
    """Run the server over HTTP in its own process; return ``(process, url)`` once it listens."""
    import socket
    import subprocess
    import time
    from pathlib import Path

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-m", "tests.fakes.mcp_server", "--sse" if sse else "--http", str(port),
                             *args], cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("the fake MCP server did not start listening") from None
            time.sleep(0.05)
    return proc, f"http://127.0.0.1:{port}/{'sse' if sse else 'mcp'}"
