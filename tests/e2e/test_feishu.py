"""End to end through app.py: the feishu channel (lark-oapi's own clients) against the fake Feishu server and the
fake OpenAI server."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.fakes.bot_process import BotProcess
from tests.fakes.cluster import fresh_schema
from tests.fakes.feishu_server import APP_ID, APP_SECRET, FakeFeishu
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.push_scenarios import (
    kill_9_mid_turn_is_answered_once_after_restart,
    one_process_receives_and_the_other_takes_over,
)
from tests.fakes.telegram_api import FakeTelegramAPI

TEST_DATABASE_URL = os.environ.get("TEST_DATABASE_URL", "")
HEADER = "[Said in this group since your last answer here, not addressed to you]"


@pytest.fixture
def servers():
    with FakeFeishu() as fs, FakeOpenAIServer() as llm:
        fs.chats["oc_team"] = "Team"
        fs.users.update({"ou_bob": "Bob", "ou_carol": "Carol"})
        yield fs, llm


def start_bot(folder: Path, fs: FakeFeishu, llm: FakeOpenAIServer, **extra) -> BotProcess:
    return BotProcess(folder, channel_type="feishu", feishu_app_id=APP_ID, feishu_app_secret=APP_SECRET,
                      feishu_domain=fs.base_url, open_ai_api_base=llm.base_url, open_ai_api_key="test",
                      data_dir="data", memory_embedding_model="", web_console_port=0, **extra).start()


def user_texts(llm: FakeOpenAIServer) -> list[str]:
    """The last user message of every request the model got."""
    return [[m for m in r["messages"] if m["role"] == "user"][-1]["content"] for r in llm.requests]


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One bot for the tests that need no fresh process (a start costs seconds); each writes in chats of its own
    and counts its own requests. Its whole log is checked when it stops."""
    folder = tmp_path_factory.mktemp("feishu")
    with FakeFeishu() as fs, FakeOpenAIServer() as llm:
        fs.chats["oc_team"] = "Team"
        fs.users.update({"ou_bob": "Bob", "ou_carol": "Carol"})
        bot = start_bot(folder, fs, llm)
        try:
            yield fs, llm, bot
        finally:
            assert bot.stop() == 0
        logged = bot.log()
        assert "duplicate feishu message" in logged + (folder / "data" / "bot.log").read_text()
        assert "Traceback" not in logged and APP_SECRET not in logged


def test_private_group_background_redelivery_long_and_streamed_answers(shared):
    fs, llm, _ = shared
    before = len(llm.requests)
    llm.latency = 1.0  # a turn long enough for the "Typing" reaction to show
    first = fs.push_text("oc_alice", "hello")
    assert fs.wait_texts("oc_alice", 1) == ["echo: hello"]
    llm.latency = 0.0
    assert (first, "Typing") in fs.reacted
    fs.wait(lambda: not fs.reactions, 10, "the reaction taken off with the answer")
    # a group: a message without a trigger is kept as background, an @-mention is answered with it
    fs.push_text("oc_team", "I propose Berlin", sender="ou_carol", group=True)
    question = fs.push_text("oc_team", "what do you think?", sender="ou_bob", group=True, mention_bot=True)
    fs.wait_texts("oc_team", 1)
    assert fs.messages_in("oc_team")[0].reply_to == question
    asked = user_texts(llm)[-1]
    assert asked.startswith(HEADER) and "Carol] I propose Berlin" in asked
    assert asked.endswith("[Bob] what do you think?")
    assert len(llm.requests) == before + 2, "the untriggered message was not answered"
    # Feishu delivers the first event again: taken, not answered twice
    fs.redeliver(first)
    fs.wait_acked(first, 2)
    # an 8,000-character answer: cards in order, each within the limit
    answer = "\n\n".join(f"part {i} " + "x" * 990 for i in range(8))
    llm.enqueue_text(answer)
    fs.push_text("oc_alice", "a long one please")
    pieces = fs.wait_texts("oc_alice", 3)[1:]
    assert len(pieces) == 2 and all(len(p) <= 4000 for p in pieces)
    assert "\n\n".join(pieces) == answer
    # a streamed answer: one card, shown early and updated in place
    words = " ".join(f"word{i}" for i in range(40))
    llm.enqueue_stream(words, delay=0.1, piece=12)
    fs.push_text("oc_alice", "stream please")
    fs.wait(lambda: len(fs.messages_in("oc_alice")) == 4 and fs.texts("oc_alice")[3] == words, 30,
            "the streamed answer")
    streamed = fs.messages_in("oc_alice")[3]
    assert len(streamed.versions) >= 2, "the card was sent before the end and patched"
    time.sleep(0.5)
    assert fs.texts("oc_alice")[0] == "echo: hello" and len(fs.messages_in("oc_alice")) == 4
    # a reminder arrives in the chat it was set in
    fs.push_text("oc_alice", "/remind in 2s stand up")
    assert fs.wait_texts("oc_alice", 5)[4].startswith("OK, I'll remind you ")
    assert fs.wait_texts("oc_alice", 6)[5] == "⏰ Reminder: stand up"


def test_kill_9_mid_turn_is_answered_once_after_restart(servers, tmp_path):
    fs, llm = servers
    kill_9_mid_turn_is_answered_once_after_restart(fs, llm, start_bot(tmp_path, fs, llm), "oc_alice")


def test_a_bad_secret_is_one_line_and_telegram_keeps_running(tmp_path):
    with FakeFeishu() as fs, FakeTelegramAPI(username="fake_bot") as tg, FakeOpenAIServer() as llm:
        bot = BotProcess(tmp_path, channel_type=["telegram", "feishu"], feishu_app_id=APP_ID,
                         feishu_app_secret="not-the-secret", feishu_domain=fs.base_url,
                         telegram_bot_token=tg.token, telegram_base_url=tg.base_url, telegram_rate_limit=False,
                         open_ai_api_base=llm.base_url, open_ai_api_key="test", data_dir="data",
                         memory_embedding_model="", web_console_port=0).start()
        tg.push_text(1001, "hello", user_id=1001, first_name="Alice")
        fs.wait(lambda: tg.chat_texts(1001) == ["echo: hello"], 20, "telegram's answer")
        assert bot.stop() == 0
        assert fs.connections == 0
    lines = [line for line in bot.log().splitlines() if "feishu" in line and ("ERROR" in line or "WARNING" in line)]
    assert len(lines) == 1, lines
    assert "feishu_app_secret was rejected (app secret invalid)" in lines[0]
    assert "not-the-secret" not in bot.log()
    assert json.loads((tmp_path / "config.json").read_text())["feishu_app_secret"] == "not-the-secret"


@pytest.mark.skipif(not TEST_DATABASE_URL, reason="TEST_DATABASE_URL not set (PostgreSQL only)")
def test_two_processes_one_holds_the_connection_and_the_other_takes_over_a_killed_one(servers, tmp_path):
    fs, llm = servers
    with fresh_schema(TEST_DATABASE_URL) as db_url:
        settings = {"channel_type": "feishu", "feishu_app_id": APP_ID, "feishu_app_secret": APP_SECRET,
                    "feishu_domain": fs.base_url, "open_ai_api_base": llm.base_url, "open_ai_api_key": "test",
                    "data_dir": str(tmp_path / "data"), "db_url": db_url, "memory_embedding_model": ""}
        bots = []
        for i in range(2):
            (tmp_path / f"bot{i}").mkdir()
            bots.append(BotProcess(tmp_path / f"bot{i}", **settings, web_console_port=0))
        one_process_receives_and_the_other_takes_over(fs, llm, bots, "oc_alice", "feishu: receiving messages")


def test_photos_and_voice_messages_from_feishu(shared):
    """A photo is fetched through the API (the message's resource) and shown to the model; a voice message is
    fetched and transcribed at the endpoint."""
    from tests.media.harness import image_parts, jpeg

    fs, llm, _ = shared
    before, heard = len(llm.requests), len(llm.transcriptions)
    llm.enqueue_text("A plain red square.")
    fs.push_image("oc_dave", jpeg(), sender="ou_dave")
    assert fs.wait_texts("oc_dave", 1) == ["A plain red square."]
    parts = image_parts(llm.requests[before])
    assert len(parts) == 1 and parts[0]["image_url"]["url"].startswith("data:image/jpeg;base64,")
    llm.transcripts.append("see you at three")
    fs.push_audio("oc_dave", b"OggS fake opus", sender="ou_dave")
    assert fs.wait_texts("oc_dave", 2)[1] == '(heard: "see you at three")\n\necho: see you at three'
    assert [(t["filename"], t["audio"]) for t in llm.transcriptions[heard:]] == [("voice.ogg", b"OggS fake opus")]
