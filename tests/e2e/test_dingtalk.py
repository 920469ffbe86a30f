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


def test_private_group_redelivery_and_a_long_answer(servers, tmp_path):
    dt, llm = servers
    bot = bot_for(tmp_path, dt, llm).start()
    try:
        first = dt.push_text("cid_alice", "hello")
        assert dt.wait_texts("cid_alice", 1) == ["echo: hello"]
        # a group: DingTalk delivers only @-mentions to a bot; one that is not (as a client may still send) is
        # kept as background, the mention is answered with it
        dt.push_text("cid_team", "I propose Berlin", staff_id="carol01", nick="Carol", group="Team")
        dt.push_text("cid_team", "what do you think?", staff_id="bob01", nick="Bob", group="Team", at_bot=True)
        assert len(dt.wait_texts("cid_team", 1)) == 1
        asked = user_texts(llm)[-1]
        assert "Carol] I propose Berlin" in asked and asked.endswith("[Bob] what do you think?")
        assert len(llm.requests) == 2
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
    finally:
        assert bot.stop() == 0
    logged = bot.log() + (tmp_path / "data" / "bot.log").read_text()
    assert "duplicate dingtalk message" in logged
    assert "Traceback" not in bot.log() and CLIENT_SECRET not in logged


def test_kill_9_mid_turn_is_answered_once_after_restart(servers, tmp_path):
    dt, llm = servers
    bot = bot_for(tmp_path, dt, llm).start()
    dt.push_text("cid_alice", "first")
    dt.wait_texts("cid_alice", 1)
    llm.latency = 5.0
    requests = len(llm.requests)
    slow = dt.push_text("cid_alice", "slow")
    llm.wait_for_requests(requests + 1, timeout=15)
    dt.wait_acked(slow)
    bot.kill()
    llm.latency = 0.0
    bot.start()
    dt.push_text("cid_alice", "after")
    dt.wait_texts("cid_alice", 3)
    time.sleep(1.0)
    # the resumed answer shows the question it answers
    assert dt.texts("cid_alice") == ["echo: first", "> slow\n\necho: slow", "echo: after"]
    assert dt.deliveries[dt.frames_of[slow]] == 1
    assert bot.stop() == 0


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
        for bot in bots:
            bot.start(wait_for_log=None)
        try:
            for bot in bots:
                bot.wait_for_log("INFO app: ready:", 60)
            for text in ("one", "two"):
                dt.push_text("cid_alice", text)
            assert dt.wait_texts("cid_alice", 2) == ["echo: one", "echo: two"]
            receiving = "dingtalk: receiving messages"
            dt.wait(lambda: sum(receiving in b.log() for b in bots) == 1, 30, "one process receiving")
            assert dt.connections == 1
            leader = next(i for i, b in enumerate(bots) if receiving in b.log())
            llm.latency = 5.0
            requests = len(llm.requests)
            slow = dt.push_text("cid_alice", "slow")
            llm.wait_for_requests(requests + 1, timeout=15)
            dt.wait_acked(slow)
            bots[leader].kill()
            llm.latency = 0.0
            bots[1 - leader].wait_for_log(receiving, 60)
            dt.push_text("cid_alice", "after")
            dt.wait_texts("cid_alice", 4, timeout=60)
            time.sleep(1.0)
            assert dt.texts("cid_alice") == ["echo: one", "echo: two", "echo: slow", "echo: after"]
        finally:
            for bot in bots:
                if bot.pid is not None:
                    bot.stop()


def test_pictures_and_voice_messages_from_dingtalk(tmp_path):
    """A picture is fetched through the robot's file API and shown to the model; a voice message is read from
    DingTalk's own transcript."""
    from tests.media.harness import image_parts, jpeg

    with FakeDingTalk() as dt, FakeOpenAIServer(model="gpt-4o-mini") as llm:
        bot = bot_for(tmp_path, dt, llm, model="gpt-4o-mini").start()
        try:
            llm.enqueue_text("A plain red square.")
            dt.push_picture("cid_alice", jpeg())
            assert dt.wait_texts("cid_alice", 1) == ["A plain red square."]
            parts = image_parts(llm.requests[0])
            assert len(parts) == 1 and parts[0]["image_url"]["url"].startswith("data:image/jpeg;base64,")
            dt.push_audio("cid_alice", "明天下午三点开会")
            assert dt.wait_texts("cid_alice", 2)[1] == '(heard: "明天下午三点开会")\n\necho: 明天下午三点开会'
            assert llm.transcriptions == []
        finally:
            assert bot.stop() == 0
        assert "Traceback" not in bot.log()
