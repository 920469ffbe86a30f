"""What one message costs the weixin channel, receive and reply, beside the Telegram channel doing the same.

Each channel polls its fake server (tests/fakes/ilink_server.py, tests/fakes/telegram_api.py) while messages
arrive at ``--rate`` per second from 50 users; every message is handed over as an ``IncomingMessage`` (the
dispatcher's place is a counting submitter) and answered at once with a 300-character reply through the
channel's ``send`` (Telegram renders it to HTML first; WeChat takes plain text). What is measured is the
CPU time of the event-loop thread per message, receive and reply together (the fakes run in other
threads), median of ``--runs`` interleaved runs, and the weixin / telegram ratio.

Usage: ``python bench/weixin_intake.py [--messages 150] [--rate 30] [--runs 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import median, print_table  # noqa: E402
from channels.telegram.channel import TelegramChannel  # noqa: E402
from channels.weixin.channel import WeixinChannel  # noqa: E402
from channels.weixin.login import Account, LoginFiles  # noqa: E402
from config.settings import Config  # noqa: E402
from core.messages import IncomingMessage  # noqa: E402
from tests.fakes.ilink_server import FakeILink  # noqa: E402
from tests.fakes.telegram_api import FakeTelegramAPI  # noqa: E402

REPLY = ("Here is what I found about the weather tomorrow: mostly sunny in the morning, clouds after "
         "noon, a light breeze from the west, and about 21 degrees at the warmest. Take a jacket for the "
         "evening; it cools down quickly after sunset, to about 12 degrees. No rain is expected at all.")[:300]


def pace(n: int, rate: float, push_one: Callable[[int], None]) -> None:
    """Push ``n`` messages at ``rate`` per second."""
    start = time.perf_counter()
    for i in range(n):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        push_one(i)


async def answer_all(channel, n: int, rate: float, push_one: Callable[[int], None]) -> float:
    """Run the channel until ``n`` messages are received and answered; the loop thread's CPU seconds."""
    done = asyncio.Event()
    answered = 0
    tasks: set[asyncio.Task] = set()

    async def reply(msg: IncomingMessage) -> None:
        nonlocal answered
        await channel.send(msg, REPLY)
        answered += 1
        if answered == n:
            done.set()

    def submit(msg: IncomingMessage) -> None:
        task = asyncio.create_task(reply(msg))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def never(msg: IncomingMessage) -> None:
        raise AssertionError("both channels submit synchronously")

    channel.set_handler(never, submit=submit)
    await channel.start()
    pusher = threading.Thread(target=pace, args=(n, rate, push_one), daemon=True)
    cpu = time.thread_time()
    try:
        pusher.start()
        async with asyncio.timeout(n / rate + 60):
            await done.wait()
        return time.thread_time() - cpu
    finally:
        pusher.join()
        await channel.stop()


def run_weixin(n: int, rate: float) -> float:
    with FakeILink(hold_s=5) as api, tempfile.TemporaryDirectory() as folder:
        token = "bench-token@im.bot:0"
        api.tokens.append(token)
        LoginFiles(Path(folder)).save_account(Account(bot_token=token, base_url=api.base_url))
        channel = WeixinChannel(Config(data_dir=folder, weixin_base_url=api.base_url))
        return asyncio.run(answer_all(channel, n, rate,
                                      lambda i: api.push_text(f"user{i % 50}@im.wechat", f"message {i} about "
                                                              "the weather tomorrow")))


def run_telegram(n: int, rate: float) -> float:
    with FakeTelegramAPI() as api:
        cfg = Config(channel_type="telegram", telegram_bot_token=api.token, telegram_base_url=api.base_url,
                     telegram_rate_limit=False)
        channel = TelegramChannel(cfg, poll_timeout=1)
        return asyncio.run(answer_all(channel, n, rate, lambda i: api.push_text(
            1000 + i % 50, f"message {i} about the weather tomorrow", user_id=1000 + i % 50)))


def main() -> None:
    """Run both channels ``--runs`` times, interleaved, and print CPU per message and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--messages", type=int, default=150)
    parser.add_argument("--rate", type=float, default=30.0)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    results: dict[str, list[float]] = {"weixin": [], "telegram": []}
    for _ in range(args.runs):
        results["weixin"].append(run_weixin(args.messages, args.rate))
        results["telegram"].append(run_telegram(args.messages, args.rate))
    rows = [(name, f"{median(runs) / args.messages * 1000:.3f} ms CPU/message",
             f"runs: {', '.join(f'{r / args.messages * 1000:.2f}' for r in runs)}") for name, runs in results.items()]
    ratio = median(results["weixin"]) / median(results["telegram"])
    rows.append(("weixin / telegram", f"{ratio:.2f}x", f"at {args.rate:g} messages/s, {args.runs} runs"))
    print_table(rows)


if __name__ == "__main__":
    main()
