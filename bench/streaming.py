"""Streamed replies on Telegram: time to the first visible text, and total time, for a 10 s answer.

The real app (``app.py``, the real python-telegram-bot) runs against the fake Bot API and a fake model
that streams (tests/fakes/): the model's first piece comes ``--first`` seconds after the request, then
one piece every 0.1 s for about ``--seconds`` seconds. Measured from the fake servers' clocks: the model's
first token to the first message the chat shows, and the request to the final edit. Runs with
``stream_replies`` on and off alternate (on a noisy machine, read the medians).

Usage: ``python bench/streaming.py [--runs 3] [--seconds 10] [--first 0.5]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import median  # noqa: E402
from tests.fakes.bot_process import BotProcess  # noqa: E402
from tests.fakes.openai_server import FakeOpenAIServer  # noqa: E402
from tests.fakes.telegram_api import FakeTelegramAPI  # noqa: E402

PIECE_DELAY = 0.1


def one_run(stream: bool, seconds: float, first: float, chat: int) -> tuple[float, float, int]:
    """(first visible text after the model's first token, total from the request, edits) for one answer."""
    pieces = int(seconds / PIECE_DELAY)
    text = " ".join(f"w{i:03d}" for i in range(pieces * 2))  # 5 characters a word: a piece of 10 every 0.1 s
    with FakeTelegramAPI() as api, FakeOpenAIServer() as llm, tempfile.TemporaryDirectory() as tmp:
        proc = BotProcess(Path(tmp), channel_type="telegram", telegram_bot_token=api.token,
                          telegram_base_url=api.base_url, telegram_rate_limit=False, open_ai_api_base=llm.base_url,
                          open_ai_api_key="k", model_max_parallel=1000, data_dir="data", stream_replies=stream,
                          memory_embedding_model="").start()
        try:
            llm.enqueue_stream(text, first_delay=first, delay=PIECE_DELAY, piece=10)
            if not stream:  # the whole answer takes the model as long as the stream does
                llm.latency = first + pieces * PIECE_DELAY
            api.push_text(chat, "tell me", user_id=chat)
            llm.wait_for_requests(1, timeout=30)
            asked = time.monotonic()
            api.wait_for_sent_sync(1, timeout=60)
            shown = min(m["sent_at"] for m in api.messages.values())
            deadline = time.monotonic() + 60
            while api.chat_texts(chat) != [text] and time.monotonic() < deadline:
                time.sleep(0.01)
            done = max([shown, *api.edit_times])
            return shown - (asked + first), done - asked, len(api.edits)
        finally:
            proc.stop()


def main() -> None:
    """Run the rounds and print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--first", type=float, default=0.5)
    args = parser.parse_args()
    results: dict[bool, list[tuple[float, float, int]]] = {True: [], False: []}
    for i in range(args.runs):
        for stream in (True, False):
            results[stream].append(one_run(stream, args.seconds, args.first, 9000 + i))
            print(f"run {i + 1} stream_replies={stream}: first text {results[stream][-1][0]:+.2f} s after the "
                  f"first token, total {results[stream][-1][1]:.2f} s, {results[stream][-1][2]} edits", flush=True)
    for stream in (True, False):
        rows = results[stream]
        print(f"stream_replies={str(stream).lower():5}: first visible text {median(r[0] for r in rows):+.2f} s after "
              f"the model's first token; total {median(r[1] for r in rows):.2f} s; "
              f"{median(r[2] for r in rows):.0f} edits (median of {len(rows)})")


if __name__ == "__main__":
    main()
