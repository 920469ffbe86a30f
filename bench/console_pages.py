"""Benchmark of the web console's two heaviest pages, without HTTP: what each request computes.

- the conversations list: 100 conversations (the page's limit), each with ``--messages`` messages in its
  context, counted with the model's tokenizer (the "tokens in context" column);
- one conversation: its last 2,000 messages by turn, the summary's fact check and the Jinja2 rendering.

Run: ``python bench/console_pages.py [--messages 40] [--rounds 15]``. Prints medians in milliseconds. The
pages run their database reads on the store's thread and the token counting in a worker thread, so the
figures are the time an operator waits, not time the chats' event loop is blocked.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

from _common import median, print_table, seed_sessions

from agent.tokens import TokenCounter
from console import data
from console.conversations import count_tokens, transcript_and_check
from console.server import HERE
from store.store import Store


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


async def run(messages: int, rounds: int) -> list[tuple[str, str, str]]:
    """Seed a database, then time the pages' work ``rounds`` times each."""
    import jinja2

    folder = Path(tempfile.mkdtemp(prefix="bench-console-"))
    url = f"sqlite:///{folder / 'chatbot.db'}"
    store = Store(url)
    await store.open()
    await store.close()
    seed_sessions(folder / "chatbot.db", sessions=100, per_session=messages, last_active=datetime.now(UTC))
    seed_sessions(folder / "chatbot.db", sessions=1, per_session=2000, last_active=datetime.now(UTC),
                  prefix="telegram:", first_chat=9_000_000, summarized=1000)
    store = Store(url)
    await store.open()
    counter = TokenCounter("gpt-4o-mini")
    services = SimpleNamespace(agent=SimpleNamespace(counter=lambda model: counter),
                               config=lambda: SimpleNamespace(model="gpt-4o-mini"))
    templates = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True)
    page = templates.get_template("conversation.html")
    listing, counting, detail, render = [], [], [], []
    sid = "telegram:9000000"
    try:
        for _ in range(rounds):
            started = time.perf_counter()
            rows = await store.sessions.listing("")
            contexts = await store.sessions.context_messages(rows)
            listing.append(_ms(started))
            started = time.perf_counter()
            count_tokens(services, contexts)
            counting.append(_ms(started))
            started = time.perf_counter()
            row = await store.sessions.row(sid)
            stored = await store.sessions.last_messages(sid, data.TRANSCRIPT_LIMIT)
            turns, check = transcript_and_check(row, stored)
            detail.append(_ms(started))
            started = time.perf_counter()
            page.render(nav=[], path="/conversation", csrf="x", authed=True, mode="token", static=lambda n: n,
                        title=sid, row=row, turns=turns, check=check, files=[], notes_file="MEMORY.md",
                        shown_limit=data.TRANSCRIPT_LIMIT, message_count=len(stored), notice="")
            render.append(_ms(started))
    finally:
        await store.close()
    return [
        (f"list: 100 conversations, {messages} messages each in context (one query)", f"{median(listing):.1f} ms",
         "-"),
        ("list: counting their tokens, first view (worker thread)", f"{counting[0]:.1f} ms", "-"),
        ("list: counting their tokens, later views (counts kept)", f"{median(counting[1:]):.1f} ms", "-"),
        ("conversation: 2,000 messages by turn + fact check of 500 turns, first view", f"{detail[0]:.1f} ms", "-"),
        ("conversation: the same, later views (check kept)", f"{median(detail[1:]):.1f} ms", "-"),
        ("conversation: Jinja2 rendering of 2,000 messages", f"{median(render):.1f} ms", "-"),
    ]


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    print_table(asyncio.run(run(args.messages, args.rounds)))


if __name__ == "__main__":
    main()
