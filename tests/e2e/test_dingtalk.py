"""End to end through app.py: the dingtalk channel (dingtalk-stream's own Stream client, pointed at the fake by the
SDK's DINGTALK_OPENAPI_ENDPOINT) against the fake DingTalk server and the fake OpenAI server."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.fakes.bot_process import BotProcess
from tests.fakes.cluster import fresh_schema
from tests.fakes.dingtalk_server import CLIENT_ID, CLIENT_SECRET, FakeDingTalk
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.push_scenarios import (
    kill_9_mid_turn_is_answered_once_after_restart,
    one_process_receives_and_the_other_takes_over,
)
from tests.fakes.telegram_api import FakeTelegramAPI

TEST_DATABASE_URL = os.environ.get("TEST_DATABASE_URL", "")


@pytest.fixture
def servers():
    with FakeDingTalk() as dt, FakeOpenAIServer() as llm:
        yield dt, llm


def bot_for(folder: Path, dt: FakeDingTalk, llm: FakeOpenAIServer, **settings) -> BotProcess:
    base = dict(channel_type="dingtalk", dingtalk_client_id=CLIENT_ID, dingtalk_client_secret=CLIENT_SECRET,
                open_ai_api_base=llm.base_url, open_ai_api_key="test", data_dir="data", memory_embedding_model="",
                web_console_port=0)
    bot = BotProcess(folder, **{**base, **settings})
    bot.extra_env["DINGTALK_OPENAPI_ENDPOINT"] = dt.base_url
    return bot


def user_texts(llm: FakeOpenAIServer) -> list[str]:
    return [[m for m in r["messages"] if m["role"] == "user"][-1]["content"] for r in llm.requests]


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One bot for the tests that need no fresh process (a start costs seconds); each writes in chats of its own
    and counts its own requests. Its whole log is checked when it stops."""
    folder = tmp_path_factory.mktemp("dingtalk")
    with FakeDingTalk() as dt, FakeOpenAIServer() as llm:
        bot = bot_for(folder, dt, llm).start()
        try:
            yield dt, llm, bot
        finally:
            assert bot.stop() == 0
        logged = bot.log() + (folder / "data" / "bot.log").read_text()
        assert "duplicate dingtalk message" in logged
        assert "Traceback" not in bot.log() and CLIENT_SECRET not in logged


def test_private_group_redelivery_and_a_long_answer(shared):
    dt, llm, _ = shared
    before = len(llm.requests)
    first = dt.push_text("cid_alice", "hello")
    assert dt.wait_texts("cid_alice", 1) == ["echo: hello"]
    # a group: DingTalk delivers only @-mentions to a bot; one that is not (as a client may still send) is
    # kept as background, the mention is answered with it
    dt.push_text("cid_team", "I propose Berlin", staff_id="carol01", nick="Carol", group="Team")
    dt.push_text("cid_team", "what do you think?", staff_id="bob01", nick="Bob", group="Team", at_bot=True)
    assert len(dt.wait_texts("cid_team", 1)) == 1
    asked = user_texts(llm)[-1]
    assert "Carol] I propose Berlin" in asked and asked.endswith("[Bob] what do you think?")
    assert len(llm.requests) == before + 2
    dt.redeliver(first)
    dt.wait_acked(first, 2)
    answer = "\n\n".join(f"part {i} " + "x" * 990 for i in range(8))
    llm.enqueue_text(answer)
    dt.push_text("cid_alice", "a long one please")
    pieces = dt.wait_texts("cid_alice", 3)[1:]
    assert len(pieces) == 2 and all(len(p) <= 4000 for p in pieces)
    assert "\n\n".join(pieces) == answer
    time.sleep(0.5)
    assert dt.texts("cid_alice")[0] == "echo: hello" and len(dt.texts("cid_alice")) == 3
    assert all(s.msg_key == "sampleMarkdown" for s in dt.sent)
    # a reminder arrives in the chat it was set in (the robot API: no session webhook needed)
    dt.push_text("cid_alice", "/remind in 2s stand up")
    assert dt.wait_texts("cid_alice", 4)[3].startswith("OK, I'll remind you ")
    assert dt.wait_texts("cid_alice", 5)[4] == "⏰ Reminder: stand up"


def test_kill_9_mid_turn_is_answered_once_after_restart(servers, tmp_path):
    dt, llm = servers
    kill_9_mid_turn_is_answered_once_after_restart(dt, llm, bot_for(tmp_path, dt, llm).start(), "cid_alice")


def test_a_bad_secret_is_one_line_and_telegram_keeps_running(tmp_path):
    with FakeDingTalk() as dt, FakeTelegramAPI(username="fake_bot") as tg, FakeOpenAIServer() as llm:
        bot = bot_for(tmp_path, dt, llm, channel_type=["telegram", "dingtalk"], dingtalk_client_secret="wrong",
                      telegram_bot_token=tg.token, telegram_base_url=tg.base_url, telegram_rate_limit=False).start()
        tg.push_text(1001, "hello", user_id=1001, first_name="Alice")
        dt.wait(lambda: tg.chat_texts(1001) == ["echo: hello"], 20, "telegram's answer")
        assert bot.stop() == 0
        assert dt.connections == 0
    lines = [line for line in bot.log().splitlines() if "dingtalk" in line and ("ERROR" in line or "WARNING" in line)]
    assert len(lines) == 1, lines
    assert "DingTalk rejected dingtalk_client_id / dingtalk_client_secret (authFailed" in lines[0]


@pytest.mark.skipif(not TEST_DATABASE_URL, reason="TEST_DATABASE_URL not set (PostgreSQL only)")
def test_two_processes_one_holds_the_connection_and_the_other_takes_over_a_killed_one(servers, tmp_path):
    dt, llm = servers
    with fresh_schema(TEST_DATABASE_URL) as db_url:
        bots = []
        for i in range(2):
            (tmp_path / f"bot{i}").mkdir()
            bots.append(bot_for(tmp_path / f"bot{i}", dt, llm, data_dir=str(tmp_path / "data"), db_url=db_url,
                                web_console_port=0))
        one_process_receives_and_the_other_takes_over(dt, llm, bots, "cid_alice", "dingtalk: receiving messages")


def test_pictures_and_voice_messages_from_dingtalk(shared):
    """A picture is fetched through the robot's file API and shown to the model; a voice message is read from
    DingTalk's own transcript."""
    from tests.media.harness import image_parts, jpeg

    dt, llm, _ = shared
    before, heard = len(llm.requests), len(llm.transcriptions)
    llm.enqueue_text("A plain red square.")
    dt.push_picture("cid_dave", jpeg(), staff_id="dave01", nick="Dave")
    assert dt.wait_texts("cid_dave", 1) == ["A plain red square."]
    parts = image_parts(llm.requests[before])
    assert len(parts) == 1 and parts[0]["image_url"]["url"].startswith("data:image/jpeg;base64,")
    dt.push_audio("cid_dave", "明天下午三点开会", staff_id="dave01", nick="Dave")
    assert dt.wait_texts("cid_dave", 2)[1] == '(heard: "明天下午三点开会")\n\necho: 明天下午三点开会'
    assert llm.transcriptions[heard:] == []
