"""Telegram intake at Telegram's own rate: PTB's ``Application`` against our ``ExtBot`` + ``Updater`` + one task.

Both paths poll the fake Bot API (tests/fakes/telegram_api.py) through the real python-telegram-bot and
hand each message, as an ``IncomingMessage``, to a counting submitter (the dispatcher's place). Updates
are pushed at ``--rate`` per second (Telegram lets one bot send about 30 messages a second). What is
measured is the CPU time of the event-loop thread per update (the fake server runs in other threads),
and the time the garbage collector spent in that thread, runs interleaved A/B.

Usage: ``python bench/telegram_intake.py [--updates 150] [--rate 30] [--runs 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import median, print_table  # noqa: E402
from channels.telegram.channel import TelegramChannel
from channels.telegram.incoming import UpdatesRequest
from channels.telegram.request import AiohttpRequest  # noqa: E402
from config.settings import Config  # noqa: E402
from tests.fakes.telegram_api import FakeTelegramAPI  # noqa: E402

logger = logging.getLogger(__name__)


class GCClock:
    """Time spent in collections on this thread, from ``gc.callbacks``."""

    def __init__(self) -> None:
        self.total = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.total += time.perf_counter() - self._started


def push(api: FakeTelegramAPI, n: int, rate: float) -> None:
    """Push ``n`` text updates from 50 chats at ``rate`` per second."""
    start = time.perf_counter()
    for i in range(n):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        api.push_text(1000 + i % 50, f"message {i} about the weather tomorrow", user_id=1000 + i % 50)


async def run_bypass(api: FakeTelegramAPI, cfg: Config, n: int, rate: float) -> tuple[float, float]:
    """Our path: ExtBot + Updater + one consumer task; returns (CPU s, GC s) of the loop thread."""
    got = asyncio.Event()
    count = 0

    def submit(msg) -> None:
        nonlocal count
        count += 1
        if count == n:
            got.set()

    channel = TelegramChannel(cfg, poll_timeout=1)
    channel.set_handler(_never, submit=submit)
    await channel.start()
    try:
        return await _measure(api, n, rate, got)
    finally:
        await channel.stop()


async def run_application(api: FakeTelegramAPI, cfg: Config, n: int, rate: float) -> tuple[float, float]:
    """PTB's Application with one MessageHandler doing the same conversion and submit."""
    from telegram.ext import Application, MessageHandler, filters

    got = asyncio.Event()
    count = 0
    converter = TelegramChannel(cfg)

    async def handle(update, context) -> None:
        nonlocal count
        converter.to_incoming(update.message)
        count += 1
        if count == n:
            got.set()

    app = (Application.builder().token(cfg.telegram_bot_token).base_url(api.base_url)
           .base_file_url(api.base_file_url)
           .request(AiohttpRequest(connection_pool_size=64))
           .get_updates_request(UpdatesRequest(connection_pool_size=2, read_timeout=10)).build())
    app.add_handler(MessageHandler(filters.ALL, handle))
    await app.initialize()
    converter.bot_id, converter.bot_username = app.bot.id, app.bot.username
    await app.start()
    await app.updater.start_polling(timeout=1, allowed_updates=["message"])
    try:
        return await _measure(api, n, rate, got)
    finally:
        await app.updater.stop()
        await app.stop()
        await app.shutdown()


async def _never(msg) -> None:
    raise AssertionError("the bypass path submits synchronously")


async def _measure(api: FakeTelegramAPI, n: int, rate: float, got: asyncio.Event) -> tuple[float, float]:
    clock = GCClock()
    gc.callbacks.append(clock)
    pusher = threading.Thread(target=push, args=(api, n, rate), daemon=True)
    cpu = time.thread_time()
    try:
        pusher.start()
        async with asyncio.timeout(n / rate + 30):
            await got.wait()
        return time.thread_time() - cpu, clock.total
    finally:
        gc.callbacks.remove(clock)
        pusher.join()


def main() -> None:
    """Run both paths ``--runs`` times, interleaved, and print CPU and GC time per update."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--updates", type=int, default=150)
    parser.add_argument("--rate", type=float, default=30.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    results: dict[str, list[tuple[float, float]]] = {"bypass": [], "application": []}
    for _ in range(args.runs):
        for name, runner in (("bypass", run_bypass), ("application", run_application)):
            with FakeTelegramAPI() as api:
                cfg = Config(channel_type="telegram", telegram_bot_token=api.token,
                             telegram_base_url=api.base_url, telegram_rate_limit=False)
                results[name].append(asyncio.run(runner(api, cfg, args.updates, args.rate)))
    rows = []
    for name, runs in results.items():
        cpu = median(c for c, _ in runs) / args.updates * 1000
        gcs = median(g for _, g in runs) / args.updates * 1000
        rows.append((name, f"{cpu:.3f} ms CPU/update", f"{gcs:.4f} ms GC/update"))
    ratio = median(c for c, _ in results["application"]) / median(c for c, _ in results["bypass"])
    rows.append(("application / bypass", f"{ratio:.2f}x", f"at {args.rate:g} updates/s, {args.runs} runs"))
    print_table(rows)


if __name__ == "__main__":
    main()
