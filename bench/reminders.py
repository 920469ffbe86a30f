"""What reminders cost: the look every process makes each second, and how fast due reminders are fired.

In process, on an SQLite file (or ``--db-url postgresql://…``): 10,000 pending reminders over 1,000 sessions,
none due, then 1,000 due at once. We time ``Reminders.due`` (the query each process runs every second, with
nothing due: the idle cost) and one ``ReminderFiring.tick`` that claims and journals the 1,000 due ones (the
claim, the next time of the recurring third, and the journal row for the outbox, one transaction each; the
send itself is the outbox's and is left out).

Run: ``python bench/reminders.py [--db-url URL]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import median, percentile, print_table  # noqa: E402
from config.settings import Config, ConfigHolder  # noqa: E402
from core.messages import IncomingMessage  # noqa: E402
from core.records import PendingIncoming, SessionInfo  # noqa: E402
from reminders.firing import ReminderFiring  # noqa: E402
from store.models import ReminderRow, utcnow  # noqa: E402
from store.store import Store  # noqa: E402

SESSIONS = 1_000
PENDING = 10_000
DUE = 1_000


async def seed(store: Store, now: datetime) -> None:
    """PENDING reminders due in the next days, and DUE due a second ago (a third of them daily)."""
    for i in range(SESSIONS):
        await store.sessions.ensure(SessionInfo(f"telegram:{i}", "telegram", str(i), str(i)))
    rows = []
    for i in range(PENDING + DUE):
        chat = str(i % SESSIONS)
        due = now - timedelta(seconds=1) if i >= PENDING else now + timedelta(hours=1 + i % 100)
        rows.append({"session_id": f"telegram:{chat}", "created_by": f"telegram:{chat}", "due_at": due,
                     "every": "daily 09:00" if i % 3 == 0 else None, "text": f"reminder {i}", "status": "pending",
                     "sent_at": None, "created_at": utcnow(), "late": False,
                     "target": IncomingMessage(channel="telegram", chat_id=chat, user_id=chat, text="").to_json()})
    table = ReminderRow.__table__
    await store.run(lambda conn: conn.execute(table.insert(), rows))


async def main(db_url: str) -> None:
    store = Store(db_url)
    await store.open()
    try:
        now = datetime.now(UTC)
        await seed(store, now)
        reminders = store.reminders
        idle = []
        for _ in range(200):
            started = time.perf_counter()
            await reminders.due(now - timedelta(seconds=2), ["telegram"], 100)
            idle.append((time.perf_counter() - started) * 1000)
        delivered: list[PendingIncoming] = []

        async def deliver(row: PendingIncoming) -> None:
            delivered.append(row)

        job = ReminderFiring(reminders, ConfigHolder(Config()), lambda: ["telegram"], deliver)
        started = time.perf_counter()
        fired = await job.tick(now)
        took = time.perf_counter() - started
        assert fired == DUE == len(delivered), (fired, len(delivered))
    finally:
        await store.close()
    print_table([
        ("the look each second, 10,000 pending, none due", f"median {median(idle):.2f} ms, p99 "
         f"{percentile(idle, 99):.2f} ms", "-"),
        ("firing 1,000 due at once (claim + journal row each)", f"{took:.2f} s ({DUE / took:,.0f}/s)", "-"),
    ])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db-url", default="")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(main(args.db_url or f"sqlite:///{Path(folder) / 'chatbot.db'}"))
