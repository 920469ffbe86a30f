"""The order a process walks due reminders in (reminders/firing.py ``spread``): chats shuffled, each chat's own in
due order."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from reminders.firing import spread
from store.reminders import Reminder

T0 = datetime(2026, 11, 26, 9, 0, tzinfo=UTC)


def reminder(rid: int, chat: str, minutes: int) -> Reminder:
    return Reminder(id=rid, session_id=chat, created_by=chat, due_at=T0 + timedelta(minutes=minutes), every=None,
                    text=f"r{rid}", status="pending", sent_at=None, created_at=T0, target=None, late=False)


def test_chats_come_in_varying_orders_and_each_chats_reminders_stay_in_due_order():
    due = [reminder(i, f"telegram:{i % 7}", i) for i in range(70)]
    random.seed(1)
    orders = {tuple(dict.fromkeys(r.session_id for r in spread(due))) for _ in range(20)}
    assert len(orders) > 10  # several processes start their walks at different chats
    for _ in range(20):
        walked = spread(due)
        assert sorted(r.id for r in walked) == list(range(70))  # each once
        for chat in {r.session_id for r in due}:
            mine = [r.id for r in walked if r.session_id == chat]
            assert mine == sorted(mine)
    assert spread([]) == []
