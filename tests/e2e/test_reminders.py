"""Reminders end to end (DESIGN §1.4, §1.8, §12): ``app.py`` with the Telegram fake and the fake model.

Set by ``/remind`` and by the model's ``schedule_message`` call; fired once at its time in the chat where it
was set; noted in the session's history; cancelled; one due during a ``kill -9`` outage fires once after the
restart, marked late.
"""

from __future__ import annotations

import json
import sqlite3
import time
from datetime import UTC, datetime, timedelta

import pytest

from tests.e2e.test_telegram import sent_to, settings, wait_sent
from tests.fakes.bot_process import BotProcess
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_api import FakeTelegramAPI


@pytest.fixture
def servers():
    with FakeTelegramAPI() as api, FakeOpenAIServer() as llm:
        yield api, llm


def rows(folder, sql, *args):
    db = sqlite3.connect(folder / "data" / "chatbot.db")
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def reminders_sent(api, chat) -> list[str]:
    return [t for t in sent_to(api, chat) if t.startswith("⏰")]


def wait_reminders(api, chat, n, timeout=15.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while len(reminders_sent(api, chat)) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"chat {chat}: {sent_to(api, chat)}")
        time.sleep(0.05)
    return reminders_sent(api, chat)


def test_set_by_command_fires_once_and_the_model_knows(servers, tmp_path):
    api, llm = servers
    bot = BotProcess(tmp_path, **settings(api, llm, timezone="Europe/Berlin")).start()
    try:
        api.push_text(20, "hello", user_id=20)
        assert wait_sent(api, 20, 1) == ["echo: hello"]
        api.push_text(20, "/remind in 3s stretch your legs", user_id=20)
        answer = wait_sent(api, 20, 2)[1]
        assert answer.startswith("OK, I'll remind you ") and answer.endswith("(Europe/Berlin): stretch your legs")
        api.push_text(20, "/reminders", user_id=20)
        listed = wait_sent(api, 20, 3)[2]
        lines = [line for line in listed.splitlines() if line]
        assert lines[0] == "Pending reminders (1):" and len(lines) == 2
        assert lines[1].startswith("1. ") and lines[1].endswith("(Europe/Berlin): stretch your legs")
        assert reminders_sent(api, 20) == []
        assert wait_reminders(api, 20, 1, timeout=10) == ["⏰ Reminder: stretch your legs"]
        time.sleep(2.5)  # several more ticks of the job: it is not sent again
        assert reminders_sent(api, 20) == ["⏰ Reminder: stretch your legs"]
        api.push_text(20, "did you remind me?", user_id=20)
        wait_sent(api, 20, 5)
        history = [(m["role"], m["content"]) for m in llm.requests[-1]["messages"] if m["role"] != "system"]
        # the reminder is in the history, after the turn it followed: the model knows it reminded
        assert history == [("user", "hello"), ("assistant", "echo: hello"),
                           ("assistant", "⏰ Reminder: stretch your legs"), ("user", "did you remind me?")]
        api.push_text(20, "/reminders", user_id=20)
        assert wait_sent(api, 20, 6)[5].startswith("No pending reminders in this chat.")
    finally:
        assert bot.stop() == 0
    assert rows(tmp_path, "SELECT status, late, sent_at IS NOT NULL FROM reminders") == [("sent", 0, 1)]
    assert rows(tmp_path, "SELECT count(*) FROM inbox WHERE status = 'pending'") == [(0,)]


def test_set_by_the_models_tool_call_and_cancel(servers, tmp_path):
    api, llm = servers
    bot = BotProcess(tmp_path, **settings(api, llm, timezone="Asia/Shanghai")).start()
    try:
        llm.enqueue_tool_calls([("schedule_message", json.dumps({"when": "明天早上9点", "text": "给妈妈打电话"}))])
        llm.enqueue_text("好的，明天早上9点提醒你。")
        api.push_text(21, "明天早上9点提醒我给妈妈打电话", user_id=21)
        assert wait_sent(api, 21, 1) == ["好的，明天早上9点提醒你。"]
        tool_result = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool"][-1]
        assert tool_result.startswith("OK, I'll remind you ") and "09:00 (Asia/Shanghai): 给妈妈打电话" in tool_result
        due = rows(tmp_path, "SELECT due_at, text, created_by, status FROM reminders")
        tomorrow = (datetime.now(UTC).astimezone(__import__("zoneinfo").ZoneInfo("Asia/Shanghai")).date()
                    + timedelta(days=1))
        assert len(due) == 1 and due[0][1:] == ("给妈妈打电话", "telegram:21", "pending")
        assert datetime.fromisoformat(due[0][0]).astimezone(UTC) == datetime(
            tomorrow.year, tomorrow.month, tomorrow.day, 1, 0, tzinfo=UTC)  # 09:00 in Shanghai is 01:00 UTC
        api.push_text(21, "/reminders cancel 2", user_id=21)
        assert wait_sent(api, 21, 2)[1] == "There is no reminder 2 here; pick a number from 1 to 1 (/reminders)."
        api.push_text(21, "/reminders cancel 1", user_id=21)
        assert wait_sent(api, 21, 3)[2] == "Cancelled reminder 1: 给妈妈打电话"
        api.push_text(21, "/remind yesterday-ish 9:00 something", user_id=21)
        assert wait_sent(api, 21, 4)[3].startswith("I can't read a time at the start of")
        api.push_text(21, "/remind today 0:00 too late", user_id=21)
        assert wait_sent(api, 21, 5)[4].startswith("that time has passed")
    finally:
        assert bot.stop() == 0
    assert rows(tmp_path, "SELECT status FROM reminders") == [("cancelled",)]


def test_due_during_a_kill_9_outage_fires_once_after_restart_marked_late(servers, tmp_path):
    api, llm = servers
    bot = BotProcess(tmp_path, **settings(api, llm)).start()
    api.push_text(22, "/remind in 4s take the pizza out", user_id=22)
    assert wait_sent(api, 22, 1)[0].startswith("OK, I'll remind you ")
    bot.kill()
    time.sleep(5)  # it falls due while no process runs
    assert reminders_sent(api, 22) == []
    bot.start()
    try:
        sent = wait_reminders(api, 22, 1, timeout=15)
        assert len(sent) == 1 and sent[0].startswith("⏰ Reminder (late: it was due ")
        assert sent[0].endswith("while I was offline): take the pizza out")
        time.sleep(2.5)
        assert len(reminders_sent(api, 22)) == 1
    finally:
        assert bot.stop() == 0
    assert rows(tmp_path, "SELECT status, late FROM reminders") == [("sent", 1)]


async def test_daily_reminder_fires_on_two_consecutive_simulated_days(servers, tmp_path):
    """The App ``app.py`` runs (bootstrap/runner.py), in this process so its clock can be moved, with the
    Telegram fake: a daily reminder fires at 09:00 on one day and, the clock moved on, at 09:00 the next day,
    once each."""
    import asyncio
    from zoneinfo import ZoneInfo

    import time_machine

    from bootstrap.runner import App
    from config.settings import load_config

    api, llm = servers
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**settings(api, llm, timezone="Europe/Berlin"), "web_console_port": 0}),
                    encoding="utf-8")
    berlin = ZoneInfo("Europe/Berlin")

    async def until(check, within: float = 15.0) -> None:
        async with asyncio.timeout(within):
            while not check():  # noqa: ASYNC110 - the fake servers run in threads: there is nothing to await
                await asyncio.sleep(0.05)

    # The app starts an hour early, so a slow start on a busy machine cannot pass 09:00 before the reminder is
    # set; the clock is moved to just before 09:00 once it is.
    with time_machine.travel(datetime(2026, 3, 28, 8, 0, 0, tzinfo=berlin), tick=True) as clock:
        app = App(path)
        run = asyncio.create_task(app.run(load_config(path, environ={})))
        try:
            await until(lambda: "reminders" in app.lifecycle.started, 20)
            api.push_text(23, "/remind every day 9:00 water the plants", user_id=23)
            await until(lambda: sent_to(api, 23))
            assert sent_to(api, 23)[0] == ("OK, I'll remind you Sat 2026-03-28 09:00 (Europe/Berlin), then every day "
                                           "at 09:00: water the plants")
            assert reminders_sent(api, 23) == []
            clock.move_to(datetime(2026, 3, 28, 8, 59, 57, tzinfo=berlin))
            await until(lambda: reminders_sent(api, 23))
            assert reminders_sent(api, 23) == ["⏰ Reminder: water the plants"]
            clock.move_to(datetime(2026, 3, 29, 8, 59, 55, tzinfo=berlin))  # the next day (CEST from 02:00)
            await asyncio.sleep(1.0)
            assert len(reminders_sent(api, 23)) == 1
            await until(lambda: len(reminders_sent(api, 23)) >= 2)
            assert reminders_sent(api, 23) == ["⏰ Reminder: water the plants"] * 2
            await asyncio.sleep(2.0)
            assert len(reminders_sent(api, 23)) == 2
        finally:
            app.request_stop()
            await asyncio.wait_for(run, 30)
    [(due, status)] = rows(tmp_path, "SELECT due_at, status FROM reminders")
    assert status == "pending"
    assert datetime.fromisoformat(due).astimezone(UTC) == datetime(2026, 3, 30, 7, 0, tzinfo=UTC)  # 09:00 CEST
