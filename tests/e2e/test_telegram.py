"""End to end through the real python-telegram-bot: app.py against the fake Bot API and fake OpenAI servers."""

from __future__ import annotations

import time

import pytest

from tests.fakes.bot_process import BotProcess
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_api import FakeTelegramAPI

BOT = "fake_test_bot"


def settings(api: FakeTelegramAPI, llm: FakeOpenAIServer, **extra):
    return {"channel_type": "telegram", "telegram_bot_token": api.token, "telegram_base_url": api.base_url,
            "telegram_rate_limit": False, "open_ai_api_base": llm.base_url, "open_ai_api_key": "test",
            "data_dir": "data", **extra}


@pytest.fixture(scope="module")
def servers():
    with FakeTelegramAPI(username=BOT) as api, FakeOpenAIServer() as llm:
        yield api, llm


@pytest.fixture(scope="module")
def bot(servers, tmp_path_factory):
    api, llm = servers
    proc = BotProcess(tmp_path_factory.mktemp("bot"), **settings(
        api, llm, group_chat_keyword=["weather"], group_name_white_list=["Team", "-300"])).start()
    yield proc
    assert proc.stop() == 0
    assert "Traceback" not in proc.log()


def sent_to(api, chat_id):
    """The bot's messages in a chat as a user sees them now (streamed replies are edited in place)."""
    return api.chat_texts(chat_id)


def wait_sent(api, chat_id, n, timeout=10.0):
    deadline = time.monotonic() + timeout
    while len(sent_to(api, chat_id)) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"chat {chat_id}: {sent_to(api, chat_id)}")
        time.sleep(0.02)
    return sent_to(api, chat_id)


def wait_chat(api, chat_id, check, timeout=15.0):
    """Wait until ``check(texts)`` holds for the chat's visible texts; return them."""
    deadline = time.monotonic() + timeout
    while not check(sent_to(api, chat_id)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"chat {chat_id}: {sent_to(api, chat_id)}")
        time.sleep(0.02)
    return sent_to(api, chat_id)


def settle(seconds=0.6):
    time.sleep(seconds)


def test_private_chat(servers, bot):
    api, llm = servers
    api.push_text(1001, "hello bot", user_id=1001, first_name="Alice")
    assert wait_sent(api, 1001, 1) == ["echo: hello bot"]
    assert api.commands, "the command menu is registered at start"
    assert any(a["chat_id"] in (1001, "1001") and a["action"] == "typing" for a in api.actions)


def test_group_needs_a_mention_prefix_keyword_or_reply(servers, bot):
    api, llm = servers
    chat = dict(chat_type="supergroup", title="Team")
    api.push_text(-100, "just chatting", user_id=1, first_name="Alice", **chat)
    api.push_text(-100, f"@{BOT} what is up", user_id=1, first_name="Alice", **chat)
    wait_sent(api, -100, 1)
    # The untriggered message came with the request as background (tests/e2e/test_group_background.py).
    assert llm.requests[-1]["messages"][-1]["content"].endswith("\n[Alice] what is up")
    api.push_text(-100, "@bot prefix works", user_id=2, first_name="Bob", **chat)
    assert wait_sent(api, -100, 2)[1] == "echo: [Bob] prefix works"
    api.push_text(-100, "how is the weather", user_id=2, first_name="Bob", **chat)
    assert wait_sent(api, -100, 3)[2] == "echo: [Bob] how is the weather"
    api.push_text(-100, "and tomorrow?", user_id=2, first_name="Bob", reply_to_bot=True, **chat)
    assert wait_sent(api, -100, 4)[3] == "echo: [Bob] and tomorrow?"
    settle()
    assert len(sent_to(api, -100)) == 4


def test_whitelist_by_title_and_id(servers, bot):
    api, _ = servers
    api.push_text(-200, f"@{BOT} hi", user_id=1, first_name="Alice", chat_type="group", title="Strangers")
    api.push_text(-300, f"@{BOT} hi", user_id=1, first_name="Alice", chat_type="group", title="By id")
    assert wait_sent(api, -300, 1) == ["echo: [Alice] hi"]
    settle()
    assert sent_to(api, -200) == []


def test_per_member_group_sessions(servers, bot):
    api, llm = servers
    chat = dict(chat_type="supergroup", title="Team")
    api.push_text(5, "hello", user_id=5, first_name="Carol")  # never the same as a group session
    wait_sent(api, 5, 1)
    api.push_text(-401, f"@{BOT} one", user_id=5, first_name="Carol", **chat)
    wait_sent(api, -401, 1)
    api.push_text(-401, f"@{BOT} two", user_id=6, first_name="Dave", **chat)
    wait_sent(api, -401, 2)
    last = llm.requests[-1]["messages"]
    assert [m["content"] for m in last if m["role"] == "user"] == ["[Dave] two"]


def test_long_reply_is_split(servers, bot):
    api, llm = servers
    text = "\n".join(f"line {i:04d} " + "x" * 80 for i in range(100))  # about 9,000 characters
    llm.enqueue_text(text)
    api.push_text(1002, "tell me a lot", user_id=1002, first_name="Eve")
    parts = wait_chat(api, 1002, lambda texts: "\n".join(texts) == text)
    assert len(parts) == 3 and all(len(p) <= 4096 for p in parts)


def test_duplicate_update_is_answered_once(servers, bot):
    api, llm = servers
    update = api.push_text(1003, "only once", user_id=1003, first_name="Finn")
    duplicate = {"message": update["message"]}
    api.push_update(duplicate)
    wait_sent(api, 1003, 1)
    settle()
    assert sent_to(api, 1003) == ["echo: only once"]


def test_sticker_gets_a_text_only_note(servers, bot):
    api, llm = servers
    before = len(llm.requests)
    api.push_sticker(1004, user_id=1004, first_name="Gus")
    assert wait_sent(api, 1004, 1) == ["I can only read text messages for now. Please type what you would like to say."]
    assert len(llm.requests) == before


def test_commands_addressed_to_this_bot_only(servers, bot):
    api, llm = servers
    before = len(llm.requests)
    chat = dict(chat_type="supergroup", title="Team")
    api.push_text(-500, "/nosuch@other_bot", user_id=1, first_name="Alice", **chat)
    api.push_text(-500, f"/nosuch@{BOT}", user_id=1, first_name="Alice", **chat)
    assert wait_sent(api, -500, 1) == ["Unknown command /nosuch. Send /help for the list."]
    settle()
    assert len(sent_to(api, -500)) == 1
    assert len(llm.requests) == before


def test_per_chat_order_under_concurrency(servers, bot):
    api, llm = servers
    llm.latency = 0.1
    try:
        for i in range(3):
            for chat in (2001, 2002, 2003):
                api.push_text(chat, f"m{i}", user_id=chat, first_name="P")
        for chat in (2001, 2002, 2003):
            assert wait_sent(api, chat, 3) == ["echo: m0", "echo: m1", "echo: m2"]
    finally:
        llm.latency = 0.0


def test_shared_group_session(tmp_path):
    # Servers of its own: the module's bot is still polling the shared fake API, and would race this
    # bot for the updates.
    with FakeTelegramAPI(username=BOT) as api, FakeOpenAIServer() as llm:
        run_shared_group_session(api, llm, tmp_path)


def run_shared_group_session(api: FakeTelegramAPI, llm: FakeOpenAIServer, tmp_path) -> None:
    proc = BotProcess(tmp_path, **settings(api, llm, group_shared_session=True)).start()
    try:
        chat = dict(chat_type="supergroup", title="Shared")
        api.push_text(-600, f"@{BOT} I am Alice", user_id=1, first_name="Alice", **chat)
        wait_sent(api, -600, 1)
        api.push_text(-600, f"@{BOT} I am Bob", user_id=2, first_name="Bob", **chat)
        wait_sent(api, -600, 2)
        last = llm.requests[-1]["messages"]
        assert [m["content"] for m in last if m["role"] == "user"] == ["[Alice] I am Alice", "[Bob] I am Bob"]
    finally:
        assert proc.stop() == 0


# --- streamed replies (stream_replies, on by default) ---------------------------------------------------
ANSWER = ("Here is **the plan**: " + " ".join(f"step{i}" for i in range(60))).strip()


def chat_edits(api, chat_id):
    return [(t, e) for t, e in zip(api.edit_times, api.edits, strict=True) if str(e["chat_id"]) == str(chat_id)]


def test_streamed_reply_is_edited_in_place_throttled_then_formatted(servers, bot):
    api, llm = servers
    before = len(llm.requests)
    # about 4 s of answer: the first piece 0.3 s after the request, then a piece every 0.1 s
    llm.enqueue_stream(ANSWER, first_delay=0.3, delay=0.1, piece=10)
    api.push_text(3001, "plan please", user_id=3001, first_name="Ann")
    llm.wait_for_requests(before + 1, timeout=10)
    asked = time.monotonic()
    [first] = wait_sent(api, 3001, 1)
    first_at = next(m["sent_at"] for m in api.messages.values() if m["chat_id"] == 3001)
    assert first_at - asked <= 0.3 + 1.0 + 0.5, "the first words show within about a second of the first token"
    assert ANSWER.startswith(first) and len(first) < len(ANSWER), "the first message holds the first words only"
    done = f"Here is <b>the plan</b>: {ANSWER.split(': ', 1)[1]}"
    wait_chat(api, 3001, lambda texts: texts == [done])
    edits = chat_edits(api, 3001)
    assert len(edits) >= 3, "the message grows in place while the model writes"
    assert all(e.get("parse_mode") is None for _, e in edits[:-1]) and edits[-1][1].get("parse_mode") == "HTML"
    gaps = [b[0] - a[0] for a, b in zip(edits, edits[1:], strict=False)]
    assert min(gaps) >= 0.9, f"at most about one edit a second per chat: {gaps}"
    assert len([m for m in api.sent if m["chat_id"] == 3001]) == 1


def test_streamed_reply_past_4096_characters_continues_in_a_new_message(servers, bot):
    api, llm = servers
    text = "\n".join(f"row {i:04d} " + "y" * 70 for i in range(80))  # about 6,400 characters
    llm.enqueue_stream(text, delay=0.03, piece=200)
    api.push_text(3002, "a long one", user_id=3002, first_name="Ben")
    parts = wait_chat(api, 3002, lambda texts: "\n".join(texts) == text)
    assert len(parts) == 2 and all(len(p) <= 4096 for p in parts)
    assert chat_edits(api, 3002), "the first message was edited as the answer grew"


def test_broken_stream_keeps_what_was_shown_and_says_so(servers, bot):
    api, llm = servers
    text = " ".join(f"word{i}" for i in range(100))
    llm.enqueue_stream(text, delay=0.05, piece=10, break_after=100)
    api.push_text(3003, "go on", user_id=3003, first_name="Cat")
    [shown] = wait_chat(api, 3003, lambda texts: len(texts) == 1 and "cut off" in texts[0])
    kept, note = shown.split("\n\n")
    assert kept == text[:100].rstrip() and note.startswith("(The answer was cut off")
    # what is stored as the answer is what the user saw
    api.push_text(3003, "and then?", user_id=3003, first_name="Cat")
    wait_sent(api, 3003, 2)
    assistant = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "assistant"]
    assert assistant == [shown]


def test_text_before_tool_calls_is_not_the_answer(servers, bot):
    api, llm = servers
    llm.enqueue_stream("Let me check.", tool_calls=[("current_time", "{}")])
    llm.enqueue_stream("It is late. " * 10, first_delay=0.2, delay=0.05)
    api.push_text(3004, "what time is it?", user_id=3004, first_name="Dan")
    wait_chat(api, 3004, lambda texts: texts == [("It is late. " * 10).strip()])
    assert any(a["chat_id"] in (3004, "3004") and a["action"] == "typing" for a in api.actions)


def test_stream_replies_off_sends_the_whole_answer_once(tmp_path):
    with FakeTelegramAPI(username=BOT) as api, FakeOpenAIServer() as llm:
        proc = BotProcess(tmp_path, **settings(api, llm, stream_replies=False)).start()
        try:
            llm.enqueue_stream(ANSWER, delay=0.05, piece=20)
            api.push_text(3005, "plan please", user_id=3005, first_name="Eva")
            [sent] = api.wait_for_sent_sync(1, timeout=15)
            assert sent["text"] == f"Here is <b>the plan</b>: {ANSWER.split(': ', 1)[1]}"
            time.sleep(0.5)
            assert api.edits == [] and len(api.sent) == 1
            assert "stream" not in llm.requests[-1]
        finally:
            assert proc.stop() == 0


def test_many_chats_at_once_all_get_every_streamed_reply(servers, bot):
    """Short instant answers in many chats at once: each streamed reply completes (a stream's stop once
    waited for its own lock when Python 3.11's wait_for swallowed the pump's cancellation)."""
    api, llm = servers
    chats = range(4100, 4115)
    for m in range(3):
        for chat in chats:
            api.push_text(chat, f"c{chat} m{m}", user_id=chat)
    for chat in chats:
        assert wait_chat(api, chat, lambda texts: len(texts) == 3, timeout=30) == [
            f"echo: c{chat} m{m}" for m in range(3)]
