"""How many Feishu events a second the feishu channel takes, each journalled before lark-oapi acks it.

The channel's handler (run by lark-oapi's WebSocket client in its own thread) hands each event to the main loop
and returns only once the message is taken, so the SDK acks one event after another: the rate is bounded by
the round trip between the two threads plus the journal's write. A burst of ``--events`` text messages from 50
chats is pushed through the fake Feishu server (tests/fakes/feishu_server.py) to the real SDK; the dispatcher's
place is a handler that waits ``--journal-ms`` (a journal write: SQLite's group commit takes about a
millisecond, PostgreSQL a few) and returns True. Measured: events acked per second from the first push to the
last ack, median of ``--runs`` runs, for a journal of 0 ms and of ``--journal-ms``.

Usage: ``python bench/feishu_intake.py [--events 300] [--journal-ms 2] [--runs 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import median, print_table  # noqa: E402
from channels.feishu.channel import FeishuChannel  # noqa: E402
from config.settings import Config  # noqa: E402
from core.messages import IncomingMessage  # noqa: E402
from tests.fakes.feishu_server import APP_ID, APP_SECRET, FakeFeishu  # noqa: E402


async def one_run(events: int, journal_s: float) -> float:
    """Events acked per second for one burst."""
    with FakeFeishu() as fs:
        channel = FeishuChannel(Config(feishu_app_id=APP_ID, feishu_app_secret=APP_SECRET,
                                       feishu_domain=fs.base_url))

        async def journal(msg: IncomingMessage) -> bool:
            if journal_s:
                await asyncio.sleep(journal_s)
            return True

        channel.set_handler(journal)
        await channel.start()
        try:
            warm = fs.push_text("oc_warm", "warm up")
            await asyncio.to_thread(fs.wait_acked, warm)
            started = time.perf_counter()
            ids = [fs.push_text(f"oc_{i % 50}", f"message {i}") for i in range(events)]
            await asyncio.to_thread(fs.wait_acked, ids[-1], 1, 120)
            await asyncio.to_thread(fs.wait, lambda: all(fs.acked.get(fs.frames_of[m]) for m in ids), 120,
                                    "every ack")
            return events / (time.perf_counter() - started)
        finally:
            await channel.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--journal-ms", type=float, default=2.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    rows = []
    for journal_ms in (0.0, args.journal_ms):
        rates = [await one_run(args.events, journal_ms / 1000) for _ in range(args.runs)]
        rows.append((f"journal {journal_ms:g} ms", f"{median(rates):.0f} events/s",
                     ", ".join(f"{r:.0f}" for r in rates)))
    print_table(rows)


if __name__ == "__main__":
    asyncio.run(main())
