"""``/export`` of a long conversation: time, peak Python memory and file size.

In process, on an SQLite file (or ``--db-url``): one conversation of ``--messages`` stored messages (default
100,000, about 200 characters each, seeded with ``Store.append``), plus a daily memory file,
MEMORY.md and person notes. We time ``write_export`` with the built-in parts and report the peak of Python
allocations during it (``tracemalloc``), which shows that the history is streamed a page at a time rather
than held whole, the longest the event loop was held meanwhile (a 10 ms ticker's worst lateness: other
chats wait that long), and the zip's size. PostgreSQL runs in a fresh schema, dropped afterwards.

Run: ``python bench/export.py [--messages N] [--db-url URL]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from types import SimpleNamespace
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.records import SessionInfo  # noqa: E402
from export.parts import ExportRequest, default_parts  # noqa: E402
from export.writer import write_export  # noqa: E402
from memory.daily import DailyMemory  # noqa: E402
from memory.person import PEOPLE_DIR, PersonNotes  # noqa: E402
from store.store import Store  # noqa: E402

SID = "telegram:4242"
TEXT = "This is a message of an ordinary length, about two hundred characters, with a few words that a person " \
       "might write in a chat: plans, names, numbers like 2026-11-26, and a question or two?"


async def run(messages: int, db_url: str | None, folder: Path) -> None:
    store = Store(db_url or f"sqlite:///{folder / 'chatbot.db'}")
    await store.open()
    try:
        info = SessionInfo(SID, "telegram", "4242", user_id="4242")
        await store.sessions.ensure(info)
        started = time.perf_counter()
        for first in range(0, messages, 2000):
            batch = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"{i}: {TEXT}"}
                     for i in range(first, min(messages, first + 2000))]
            await store.sessions.append(SID, batch)
        seeded = time.perf_counter() - started
        memory = DailyMemory(folder / "memory", ZoneInfo("UTC"))
        await memory.append(SID, "trim", "- the user plans a trip to Lyon")
        people = PersonNotes(memory.root / PEOPLE_DIR)
        await people.add("telegram:4242", "I am vegetarian.")
        services = SimpleNamespace(store=store, memory=memory, people=people)
        request = ExportRequest(session=info, person="telegram:4242", services=services,  # type: ignore[arg-type]
                                zone=ZoneInfo("UTC"))
        lag = [0.0]

        async def ticker() -> None:
            while True:
                before = time.perf_counter()
                await asyncio.sleep(0.01)
                lag[0] = max(lag[0], time.perf_counter() - before - 0.01)

        tick = asyncio.create_task(ticker())
        tracemalloc.start()
        started = time.perf_counter()
        export = await write_export(request, default_parts().all(), folder / "exports")
        took = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        tick.cancel()
        print(f"seeded {messages:,} messages in {seeded:.1f} s")
        print(f"| export of {messages:,} stored messages | {took:.1f} s, peak Python memory {peak / 1e6:.1f} MB, "
              f"event loop held at most {lag[0] * 1000:.0f} ms, zip {export.size / 1e6:.1f} MB "
              f"({', '.join(export.summaries)}) |")
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--db-url", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.db_url and args.db_url.startswith("postgresql"):
            from tests.fakes.cluster import fresh_schema

            with fresh_schema(args.db_url) as url:
                asyncio.run(run(args.messages, url, Path(tmp)))
        else:
            asyncio.run(run(args.messages, args.db_url, Path(tmp)))


if __name__ == "__main__":
    main()
