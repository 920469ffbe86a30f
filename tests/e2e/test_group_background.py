"""Group background end to end: app.py through the real python-telegram-bot, the fake Bot API and fake model.

Untriggered group messages are shown with the next request in their group (DESIGN §1.3), and nowhere else.
"""

from __future__ import annotations

import sqlite3
import time

import pytest

from tests.e2e.test_telegram import BOT, sent_to, settings, settle, wait_sent
from tests.fakes.bot_process import BotProcess
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_api import FakeTelegramAPI

HEADER = "[Said in this group since your last answer here, not addressed to you]"
#: 2026-03-10 12:00:00 UTC
NOON = 1773144000
TEAM = dict(chat_type="supergroup", title="Team")


#: Replies in one group share its edit pace (a burst of 3 calls, then one every 3 s): a third reply in a few
#: seconds may wait for its slot, longer on a loaded machine.
GROUP_WAIT = 30.0


def last_user(llm: FakeOpenAIServer) -> str:
    """The last user message of the last request the model got."""
    return [m for m in llm.requests[-1]["messages"] if m["role"] == "user"][-1]["content"]


def with_background(lines: list[str], text: str) -> str:
    return "\n".join([HEADER, *lines]) + "\n\n---\n\n" + text


def group_rows(proc: BotProcess, chat_id: int) -> int:
    with sqlite3.connect(proc.folder / "data" / "chatbot.db") as db:
        return db.execute("SELECT count(*) FROM group_messages WHERE chat_id = ? AND kind = 'message'",
                          (str(chat_id),)).fetchone()[0]


@pytest.fixture(scope="module")
def servers():
    with FakeTelegramAPI(username=BOT) as api, FakeOpenAIServer() as llm:
        yield api, llm


@pytest.fixture(scope="module")
def bot(servers, tmp_path_factory):
    api, llm = servers
    proc = BotProcess(tmp_path_factory.mktemp("bot"), **settings(
        api, llm, timezone="UTC", group_name_white_list=["Team", "Other"])).start()
    yield proc
    assert proc.stop() == 0
    assert "Traceback" not in proc.log()


def test_several_speakers_then_a_mention(servers, bot):
    api, llm = servers
    api.push_text(-10, "I propose Berlin", user_id=1, first_name="Alice", date=NOON, **TEAM)
    api.push_text(-10, "I prefer Paris", user_id=2, first_name="Bob", date=NOON + 60, **TEAM)
    api.push_text(-10, "Rome or nothing", user_id=3, first_name="Carol", date=NOON + 125, **TEAM)
    api.push_text(-10, f"@{BOT} what do you think of the plans?", user_id=4, first_name="Dave", **TEAM)
    wait_sent(api, -10, 1, timeout=GROUP_WAIT)
    assert last_user(llm) == with_background(
        ["[12:00 Alice] I propose Berlin", "[12:01 Bob] I prefer Paris", "[12:02 Carol] Rome or nothing"],
        "[Dave] what do you think of the plans?")
    # Per-member sessions: Alice's own session sees only what was said since the bot's last answer here.
    api.push_text(-10, "Berlin it is", user_id=2, first_name="Bob", date=NOON + 300, **TEAM)
    api.push_text(-10, f"@{BOT} so?", user_id=1, first_name="Alice", **TEAM)
    wait_sent(api, -10, 2, timeout=GROUP_WAIT)
    assert llm.requests[-1]["messages"][1:] == [
        {"role": "user", "content": with_background(["[12:05 Bob] Berlin it is"], "[Alice] so?")}]
    # Nothing new said: no background block at all.
    api.push_text(-10, f"@{BOT} and now?", user_id=1, first_name="Alice", **TEAM)
    wait_sent(api, -10, 3, timeout=GROUP_WAIT)
    assert last_user(llm) == "[Alice] and now?"


def test_another_group_and_a_private_chat_never_see_it(servers, bot):
    api, llm = servers
    api.push_text(-11, "the vault code is 4711", user_id=1, first_name="Alice", **TEAM)
    settle()
    api.push_text(-12, f"@{BOT} any codes?", user_id=1, first_name="Alice", chat_type="supergroup", title="Other")
    wait_sent(api, -12, 1, timeout=GROUP_WAIT)
    assert last_user(llm) == "[Alice] any codes?"
    api.push_text(1, "any codes?", user_id=1, first_name="Alice")
    wait_sent(api, 1, 1)
    assert all("4711" not in str(r["messages"]) for r in llm.requests)
    api.push_text(-11, f"@{BOT} what was the code?", user_id=2, first_name="Bob", **TEAM)
    wait_sent(api, -11, 1, timeout=GROUP_WAIT)
    assert "the vault code is 4711" in last_user(llm)


def test_reply_to_someone_elses_message(servers, bot):
    api, llm = servers
    original = api.push_text(-13, "we ship on Friday", user_id=2, first_name="Bob", **TEAM)["message"]
    api.push_text(-13, f"@{BOT} is that realistic?", user_id=1, first_name="Alice", reply_to_message=original,
                  **TEAM)
    wait_sent(api, -13, 1, timeout=GROUP_WAIT)
    assert last_user(llm).endswith('\n[Alice] (replying to Bob: "we ship on Friday") is that realistic?')
    # A reply to the bot's own answer triggers, and quotes nothing.
    api.push_text(-13, "why?", user_id=1, first_name="Alice", reply_to_bot=True, **TEAM)
    wait_sent(api, -13, 2, timeout=GROUP_WAIT)
    assert last_user(llm) == "[Alice] why?"


def test_whitelist_nothing_stored_for_groups_not_served(servers, bot):
    api, llm = servers
    before = len(llm.requests)
    api.push_text(-14, "hello strangers", user_id=1, first_name="Alice", chat_type="group", title="Strangers")
    api.push_text(-15, "hello team", user_id=1, first_name="Alice", **TEAM)
    deadline = time.monotonic() + 10
    while group_rows(bot, -15) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (group_rows(bot, -14), group_rows(bot, -15)) == (0, 1)
    assert len(llm.requests) == before and sent_to(api, -14) == []


def test_context_clear_removes_it(servers, bot):
    api, llm = servers
    api.push_text(-16, "my phone number is 555-0100", user_id=1, first_name="Alice", **TEAM)
    api.push_text(-16, "/context clear", user_id=2, first_name="Bob", **TEAM)
    assert wait_sent(api, -16, 1, timeout=GROUP_WAIT)[0].startswith("Context cleared.")
    assert group_rows(bot, -16) == 0
    api.push_text(-16, f"@{BOT} what did Alice say?", user_id=2, first_name="Bob", **TEAM)
    wait_sent(api, -16, 2, timeout=GROUP_WAIT)
    assert last_user(llm) == "[Bob] what did Alice say?"


def test_budget_squeeze_drops_the_oldest_background_first(tmp_path):
    with FakeTelegramAPI(username=BOT) as api, FakeOpenAIServer() as llm:
        # A budget of 1,600 tokens, of which the tools' schemas take about 1,000: some of these lines fit, not all.
        proc = BotProcess(tmp_path, **settings(api, llm, timezone="UTC", agent_max_context_tokens=1600,
                                               group_context_messages=100, character_desc="Be brief.")).start()
        try:
            for i in range(100):
                api.push_text(-20, f"line {i:02d} about the quarterly numbers and the plan", user_id=1,
                              first_name="Alice", date=NOON, **TEAM)
            api.push_text(-20, f"@{BOT} summary please", user_id=2, first_name="Bob", **TEAM)
            wait_sent(api, -20, 1)
            shown = last_user(llm).split("\n")
            assert shown[0] == HEADER and shown[-1] == "[Bob] summary please"
            lines = [line for line in shown if line.startswith("[12:00 Alice]")]
            numbers = [int(line.split()[3]) for line in lines]
            assert 20 <= len(numbers) < 100
            assert numbers == list(range(100 - len(numbers), 100))  # the newest, oldest first
            assert shown[1:-4] == lines and shown[-4:-1] == ["", "---", ""]
        finally:
            assert proc.stop() == 0


def test_shared_session_restart_and_cleanup(tmp_path):
    with FakeTelegramAPI(username=BOT) as api, FakeOpenAIServer() as llm:
        proc = BotProcess(tmp_path, **settings(api, llm, timezone="UTC", group_shared_session=True,
                                               conversation_max_age_days=1)).start()
        try:
            api.push_text(-30, "the meeting moved to 5 pm", user_id=1, first_name="Alice", date=NOON, **TEAM)
            api.push_text(-30, f"@{BOT} when is the meeting?", user_id=2, first_name="Bob", **TEAM)
            wait_sent(api, -30, 1)
            assert last_user(llm) == with_background(["[12:00 Alice] the meeting moved to 5 pm"],
                                                     "[Bob] when is the meeting?")
            api.push_text(-30, "bring the slides", user_id=3, first_name="Carol", date=NOON + 600, **TEAM)
            deadline = time.monotonic() + 10
            while group_rows(proc, -30) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert proc.stop() == 0

            # A restart in between: the background is in the database, and the shared session sees it.
            proc.start()
            api.push_text(-30, f"@{BOT} anything else?", user_id=1, first_name="Alice", **TEAM)
            wait_sent(api, -30, 2)
            body = llm.requests[-1]["messages"]
            assert body[-1]["content"] == with_background(["[12:10 Carol] bring the slides"],
                                                          "[Alice] anything else?")
            assert "[Bob] when is the meeting?" in str(body)  # the shared session's earlier turn
            api.push_text(-30, "old news", user_id=3, first_name="Carol", **TEAM)
            deadline = time.monotonic() + 10
            while group_rows(proc, -30) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert proc.stop() == 0

            # Age everything by two days: the cleanup soon after the next start removes it.
            with sqlite3.connect(proc.folder / "data" / "chatbot.db") as db:
                db.execute("UPDATE group_messages SET created_at = datetime(created_at, '-2 days')")
            proc.start()
            proc.wait_for_log("group background rows and", timeout=30)
            assert group_rows(proc, -30) == 0
            api.push_text(-30, f"@{BOT} still there?", user_id=1, first_name="Alice", **TEAM)
            wait_sent(api, -30, 3)
            assert last_user(llm) == "[Alice] still there?"
        finally:
            assert proc.stop() == 0
