"""plugins/builtin/reminders.py with reminders/firing.py, in-process on the real dispatcher and store, under a
controlled clock: /remind, /reminders, cancel rights in a group, the tools, and firing: once, in the chat it was
set in, noted in the history, a daily one on two consecutive days, late after an outage."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import time_machine

from agent.tools.base import ToolContext
from plugins.builtin.reminders import cancel_reminder, list_reminders, schedule_message
from reminders.firing import ReminderFiring
from store.reminders import Reminders
from tests.plugins.harness import PluginBot

BERLIN = ZoneInfo("Europe/Berlin")
SID = "telegram:100"


def berlin(*args: int) -> datetime:
    return datetime(*args, tzinfo=BERLIN)


def firing(bot: PluginBot) -> ReminderFiring:
    job = ReminderFiring(bot.dispatcher.reminders, bot.holder, lambda: ["telegram", "terminal"],
                         bot.dispatcher.answer_journalled)
    job.started_at = datetime.now(UTC)
    return job


async def fire(bot: PluginBot, job: ReminderFiring, at: datetime) -> list[str]:
    """One tick at ``at``; the texts the chat got from it."""
    before = len(bot.channel.sent)
    await job.tick(at.astimezone(UTC))
    await bot.dispatcher.wait_idle()
    return bot.channel.texts()[before:]


async def test_daily_reminder_fires_once_a_day_on_two_consecutive_days(tmp_path):
    with time_machine.travel(berlin(2026, 3, 28, 8, 0), tick=False) as clock:  # DST starts on the 29th
        async with PluginBot(tmp_path, timezone="Europe/Berlin") as bot:
            assert await bot.say("hello") == "echo: hello"
            answer = await bot.say("/remind every day 9:00 take the pills")
            assert answer == ("OK, I'll remind you Sat 2026-03-28 09:00 (Europe/Berlin), then every day at 09:00: "
                              "take the pills")
            job = firing(bot)
            assert await fire(bot, job, berlin(2026, 3, 28, 8, 59, 59)) == []
            clock.move_to(berlin(2026, 3, 28, 9, 0, 1))
            assert await fire(bot, job, berlin(2026, 3, 28, 9, 0, 1)) == ["⏰ Reminder: take the pills"]
            assert await fire(bot, job, berlin(2026, 3, 28, 9, 0, 30)) == []  # once
            assert await fire(bot, job, berlin(2026, 3, 29, 8, 59, 59)) == []
            clock.move_to(berlin(2026, 3, 29, 9, 0, 1))
            assert await fire(bot, job, berlin(2026, 3, 29, 9, 0, 1)) == ["⏰ Reminder: take the pills"]
            [pending] = await Reminders(bot.store).pending(SID)
            assert pending.due_at == berlin(2026, 3, 30, 9, 0).astimezone(UTC)  # 09:00 CEST, after the change
            # in the chat it was set in, and in the session's history (the model knows it reminded)
            assert [to.chat_id for to, text in bot.channel.sent if text.startswith("⏰")] == ["100", "100"]
            stored = await bot.store.sessions.load_messages(SID)
            assert [(m.message["role"], m.message["content"]) for m in stored] == [
                ("user", "hello"), ("assistant", "echo: hello"), ("assistant", "⏰ Reminder: take the pills"),
                ("assistant", "⏰ Reminder: take the pills")]
            state = bot.sessions.peek(SID)
            assert state is not None and [m.message["content"] for m in state.messages][-1] == \
                "⏰ Reminder: take the pills"


async def test_a_reminder_due_before_start_is_sent_late(tmp_path):
    with time_machine.travel(berlin(2026, 3, 28, 8, 0), tick=False) as clock:
        async with PluginBot(tmp_path, timezone="Europe/Berlin") as bot:
            await bot.say("/remind at 8:30 call Bob")
            clock.move_to(berlin(2026, 3, 28, 10, 0))
            job = firing(bot)  # started at 10:00: it fell due while nothing ran
            assert await fire(bot, job, berlin(2026, 3, 28, 10, 0)) == [
                "⏰ Reminder (late: it was due 2026-03-28 08:30 while I was offline): call Bob"]
            assert await fire(bot, job, berlin(2026, 3, 28, 10, 0, 5)) == []


async def test_group_cancel_by_its_creator_or_an_admin_only(tmp_path):
    group = {"is_group": True, "chat_id": "-5", "group_name": "Team"}
    with time_machine.travel(berlin(2026, 3, 28, 8, 0), tick=False):
        async with PluginBot(tmp_path, timezone="Europe/Berlin", group_shared_session=True,
                             admin_users=["telegram:7"]) as bot:
            assert (await bot.say("@bot /remind tomorrow 9:00 standup", user_id="1", **group)).startswith("OK")
            assert (await bot.say("@bot /remind tomorrow 10:00 retro", user_id="1", **group)).startswith("OK")
            listed = await bot.say("/reminders", user_id="2", **group)
            assert listed == ("Pending reminders (2):\n1. Sun 2026-03-29 09:00 (Europe/Berlin): standup\n"
                              "2. Sun 2026-03-29 10:00 (Europe/Berlin): retro")
            assert await bot.say("/reminders cancel 1", user_id="2", **group) == \
                "Reminder 1 was set by someone else; only they or an admin can cancel it."
            assert await bot.say("/reminders cancel 1", user_id="7", **group) == "Cancelled reminder 1: standup"
            assert await bot.say("/reminders cancel 1", user_id="1", **group) == "Cancelled reminder 1: retro"
            assert (await bot.say("@bot /remind tomorrow 11:00 lunch", user_id="1", user_name="Bob", **group)
                    ).startswith("OK")
            job = firing(bot)
            job.started_at = berlin(2026, 3, 29, 11, 0).astimezone(UTC)
            assert await fire(bot, job, berlin(2026, 3, 29, 11, 0, 1)) == ["⏰ Reminder for Bob: lunch"]
            assert [(to.chat_id, to.is_group) for to, _ in bot.channel.sent[-1:]] == [("-5", True)]
            assert await bot.say("/reminders cancel x", user_id="1", **group) == (
                "Usage: /reminders lists this chat's pending reminders; /reminders cancel <n> cancels one.")


async def test_bad_input_gets_a_clear_answer_and_the_limit_holds(tmp_path):
    with time_machine.travel(berlin(2026, 3, 28, 8, 0), tick=False):
        async with PluginBot(tmp_path, timezone="Europe/Berlin") as bot:
            assert (await bot.say("/remind")).startswith("Usage: /remind <when> <text>")
            assert (await bot.say("/remind whenever call mum")).startswith(
                "I can't read a time at the start of 'whenever call mum'. Examples: in 20m, at 18:30,")
            assert (await bot.say("/remind 2026-03-01 08:00 too late")).startswith("that time has passed")
            assert (await bot.say("/remind in 5m")).startswith("What should I remind you of?")
            for i in range(50):
                await Reminders(bot.store).add(SID, "telegram:100", datetime.now(UTC) + timedelta(hours=1), f"r{i}")
            assert await bot.say("/remind in 5m one more") == (
                "Not set: this chat has 50 pending reminders, the most it may have; cancel one first (/reminders).")


async def test_the_tools_set_list_and_cancel(tmp_path):
    with time_machine.travel(berlin(2026, 3, 28, 8, 0), tick=False):
        async with PluginBot(tmp_path, timezone="Europe/Berlin") as bot:
            msg = bot.channel.message("remind me", chat_id="100", user_id="100")
            ctx = ToolContext(session_id=SID, config=bot.holder(), store=bot.store, services=bot.services, message=msg)
            assert await schedule_message.call(ctx, {"when": "tomorrow 9:00", "text": "call mum"}) == (
                "OK, I'll remind you Sun 2026-03-29 09:00 (Europe/Berlin): call mum")
            assert await schedule_message.call(ctx, {"when": "", "text": "stretch", "every": "monday 9:00"}) == (
                "OK, I'll remind you Mon 2026-03-30 09:00 (Europe/Berlin), then every Monday at 09:00: stretch")
            assert (await schedule_message.call(ctx, {"when": "someday", "text": "x"})).startswith(
                "Error: I can't read a time")
            assert await list_reminders.call(ctx, {}) == (
                "Pending reminders (2):\n1. Sun 2026-03-29 09:00 (Europe/Berlin): call mum\n"
                "2. Mon 2026-03-30 09:00 (Europe/Berlin) (every Monday at 09:00): stretch")
            assert await cancel_reminder.call(ctx, {"n": 2}) == "Cancelled reminder 2: stretch"
            outside = ToolContext(session_id=SID, config=bot.holder(), store=bot.store)
            assert (await schedule_message.call(outside, {"when": "in 5m", "text": "x"})).startswith("Error:")
            [r] = await Reminders(bot.store).pending(SID)
            assert r.target is not None and r.target["chat_id"] == "100" and r.created_by == "telegram:100"


async def test_a_crash_between_claim_and_send_loses_nothing_and_sends_once(tmp_path):
    """Claimed and journalled, then the process dies before the send: the next start's crash resume sends it,
    once, and notes it in the history once; the claim is not made again."""
    async def crash(row) -> None:  # the process dies right after the claim's transaction
        return None

    with time_machine.travel(berlin(2026, 3, 28, 8, 0), tick=False) as clock:
        async with PluginBot(tmp_path, timezone="Europe/Berlin") as bot:
            await bot.say("hi")
            await bot.say("/remind at 8:30 feed the cat")
            clock.move_to(berlin(2026, 3, 28, 8, 30, 1))
            job = ReminderFiring(bot.dispatcher.reminders, bot.holder, lambda: ["telegram"], crash)
            job.started_at = berlin(2026, 3, 28, 8, 0).astimezone(UTC)
            assert await job.tick() == 1
            assert [t for t in bot.channel.texts() if t.startswith("⏰")] == []
        async with PluginBot(tmp_path) as again:  # the next start
            assert await again.dispatcher.resume_pending() == 1
            await again.dispatcher.wait_idle()
            assert again.channel.texts() == ["⏰ Reminder: feed the cat"]
            job = firing(again)
            assert await fire(again, job, berlin(2026, 3, 28, 8, 31)) == []
            stored = await again.store.sessions.load_messages(SID)
            assert [m.message["content"] for m in stored].count("⏰ Reminder: feed the cat") == 1
            assert await again.store.journal.pending() == []


async def test_a_number_too_big_for_a_date_is_too_far_ahead_not_a_failure(tmp_path):
    with time_machine.travel(berlin(2026, 3, 28, 8, 0), tick=False):
        async with PluginBot(tmp_path, timezone="Europe/Berlin") as bot:
            for when in ("in 99999999999999999999 days", "in 999999999999 minutes", "in 3000000 days",
                         "every 99999999999999999999 days", "in " + "9" * 5000 + " days"):
                assert await bot.say(f"/remind {when} x") == "that is too far ahead (at most 5 years)", when
            assert await Reminders(bot.store).pending(SID) == []


async def test_each_reminder_is_marked_sent_before_the_next_send_starts(tmp_path):
    """Reminders of several chats fall due at once. Each send that the platform accepted and that is not yet marked
    is sent again by the process that takes over after a kill -9, so only one may be in that state at a time: the
    next send starts once the previous reminder's journal row is marked done."""
    with time_machine.travel(berlin(2026, 3, 28, 8, 0), tick=False) as clock:
        async with PluginBot(tmp_path, timezone="Europe/Berlin") as bot:
            chats = [str(100 + n) for n in range(4)]
            for chat in chats:
                await bot.say(f"/remind at 8:30 call {chat}", chat_id=chat, user_id=chat)
            started: list[str] = []
            unmarked_at_send: list[int] = []
            send = bot.channel.send

            async def platform(to, text):  # sends started earlier whose reminder is not marked yet
                if text.startswith("⏰"):
                    unmarked = set((await bot.store.journal.pending_replies()).values())
                    unmarked_at_send.append(sum(1 for t in started if t in unmarked))
                    started.append(text)
                    await asyncio.sleep(0.01)  # the platform's round trip: other sessions' workers run meanwhile
                await send(to, text)

            bot.channel.send = platform
            clock.move_to(berlin(2026, 3, 28, 8, 30, 1))
            job = firing(bot)
            assert await fire(bot, job, berlin(2026, 3, 28, 8, 30, 1)) != []
            assert sorted(t for t in bot.channel.texts() if t.startswith("⏰")) == [f"⏰ Reminder: call {c}"
                                                                                  for c in chats]
            assert unmarked_at_send == [0, 0, 0, 0]  # no earlier reminder in flight or unmarked when a send starts
            assert await bot.store.journal.pending() == []
