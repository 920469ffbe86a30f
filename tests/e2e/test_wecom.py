"""End to end through app.py: the wecom channel against the fake WeCom API, its callbacks sent as WeCom sends
them (encrypted and signed, tests/fakes/wecom_api.py), and the fake OpenAI server."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.console.conftest import free_port
from tests.fakes.bot_process import BotProcess
from tests.fakes.cluster import fresh_schema
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.wecom_api import CallbackSender, FakeWecomAPI, new_aes_key

TEST_DATABASE_URL = os.environ.get("TEST_DATABASE_URL", "")
CORP, AGENT, SECRET, TOKEN = "ww0123456789abcdef", "1000002", "app-secret-0123456789", "callback-token-1"
USER = "ZhangSan"


@pytest.fixture
def servers() -> Iterator[tuple[FakeWecomAPI, FakeOpenAIServer]]:
    with FakeWecomAPI(corp_id=CORP, agent_id=AGENT, secret=SECRET) as api, FakeOpenAIServer() as llm:
        yield api, llm


def settings(api: FakeWecomAPI, llm: FakeOpenAIServer, port: int, aes_key: str, **extra) -> dict:
    return {"channel_type": "wecom", "wecom_corp_id": CORP, "wecom_agent_id": AGENT, "wecom_secret": SECRET,
            "wecom_token": TOKEN, "wecom_aes_key": aes_key, "wecom_port": port, "wecom_base_url": api.base_url,
            "open_ai_api_base": llm.base_url, "open_ai_api_key": "test", "data_dir": "data",
            "web_console_port": 0, "memory_embedding_model": "", **extra}


def start(folder: Path, api: FakeWecomAPI, llm: FakeOpenAIServer, **extra) -> tuple[BotProcess, CallbackSender]:
    port, key = free_port(), new_aes_key()
    bot = BotProcess(folder, **settings(api, llm, port, key, **extra)).start()
    return bot, CallbackSender(f"http://127.0.0.1:{port}/wecom/callback", TOKEN, key, CORP, AGENT)


def journal_rows(folder: Path, user: str) -> int:
    """The journal rows of ``user``'s private chat."""
    with sqlite3.connect(folder / "data" / "chatbot.db") as db:
        return db.execute("SELECT count(*) FROM inbox WHERE channel = 'wecom' AND session_id = ?",
                          (f"wecom:{user}",)).fetchone()[0]


class Shared:
    """The module's one bot, for the tests that need no fresh process: each uses users of its own."""

    def __init__(self, api: FakeWecomAPI, llm: FakeOpenAIServer, bot: BotProcess, wecom: CallbackSender) -> None:
        self.api, self.llm, self.bot, self.wecom = api, llm, bot, wecom


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Iterator[Shared]:
    """One bot started once for the module (a start costs seconds): the tests below send as users of their own
    and count their own replies, journal rows and tokens, so they do not depend on one another."""
    folder = tmp_path_factory.mktemp("wecom")
    with FakeWecomAPI(corp_id=CORP, agent_id=AGENT, secret=SECRET) as api, FakeOpenAIServer() as llm:
        api.chats.update({"wrGroup42", "wrGroup7"})
        bot, wecom = start(folder, api, llm, group_chat_prefix=["@bot"])
        try:
            yield Shared(api, llm, bot, wecom)
        finally:
            assert bot.stop() == 0
        log = (folder / "data" / "bot.log").read_text()
        assert "Traceback" not in bot.log() and "Traceback" not in log and SECRET not in log and "forged" not in log


def test_a_private_and_a_group_message_are_answered_and_the_url_check_passes(shared):
    api, llm, wecom = shared.api, shared.llm, shared.wecom
    user = "PrivateAndGroup"
    tokens = api.tokens_issued
    echo, response = wecom.verify_url()
    assert response.status_code == 200 and response.text == echo
    _, response = wecom.text(user, "hello from WeCom")
    assert response.status_code == 200 and response.text == ""
    assert api.wait_sent(user, 1) == ["echo: hello from WeCom"]
    _, response = wecom.text("LiSi", "@bot what is the plan?", chat_id="wrGroup42")
    assert response.status_code == 200
    assert api.wait_sent("chat:wrGroup42", 1) == ["echo: [LiSi] what is the plan?"]
    wecom.text("LiSi", "no trigger here", chat_id="wrGroup42")
    long_answer = "长" * 1500  # 4,500 bytes: three texts of at most 2,048 bytes
    llm.enqueue_text(long_answer)
    wecom.text(user, "a long one please")
    pieces = api.wait_sent(user, 4)[1:]
    assert "".join(pieces) == long_answer and all(len(p.encode()) <= 2048 for p in pieces)
    time.sleep(0.5)
    assert api.sent_to("chat:wrGroup42") == ["echo: [LiSi] what is the plan?"]  # the untriggered one is not answered
    assert api.tokens_issued == max(tokens, 1), "one token, fetched once and kept"


def test_a_bad_signature_is_refused_logged_once_and_not_journalled(shared):
    api, wecom = shared.api, shared.wecom
    user = "Signatures"
    for _ in range(3):
        _, response = wecom.text(user, "forged", wrong_signature=True)
        assert response.status_code == 403
    other = CallbackSender(wecom.url, TOKEN, new_aes_key(), CORP, AGENT)  # the right token, another AES key
    _, response = other.text(user, "forged too")
    assert response.status_code == 403
    _, response = wecom.text(user, "genuine")
    assert response.status_code == 200
    assert api.wait_sent(user, 1) == ["echo: genuine"]
    assert journal_rows(shared.bot.folder, user) == 1
    log = (shared.bot.folder / "data" / "bot.log").read_text()
    assert log.count("a callback from 127.0.0.1 was refused") == 1, "one line, not one per request"
    assert "forged" not in log and "Traceback" not in log


def test_a_retried_callback_is_answered_once(shared):
    api, llm, wecom = shared.api, shared.llm, shared.wecom
    user = "Retried"
    msg_id, first = wecom.text(user, "only once please")
    for _ in range(2):  # WeCom retries with the same MsgId when it thinks the callback failed
        _, again = wecom.text(user, "only once please", msg_id=msg_id)
        assert again.status_code == 200
    assert first.status_code == 200
    api.wait_sent(user, 1)
    time.sleep(1.0)
    assert api.sent_to(user) == ["echo: only once please"]
    assert len([r for r in llm.requests if "only once" in str(r["messages"][-1])]) == 1


def test_an_expired_token_is_replaced_once_and_the_reply_still_goes_out(shared):
    api, wecom = shared.api, shared.wecom
    user = "Expired"
    wecom.text(user, "one")
    api.wait_sent(user, 1)
    tokens = api.tokens_issued
    api.expire_tokens()
    wecom.text(user, "two")
    assert api.wait_sent(user, 2) == ["echo: one", "echo: two"]
    assert api.tokens_issued == tokens + 1


def test_reminders_are_delivered_in_the_chat_they_were_set_in(shared):
    api, wecom = shared.api, shared.wecom
    user = "Reminded"
    wecom.text(user, "/remind in 2s drink water")
    assert api.wait_sent(user, 1)[0].startswith("OK, I'll remind you ")
    wecom.text("WangWu", "@bot /remind in 2s stand-up meeting", chat_id="wrGroup7")
    assert api.wait_sent("chat:wrGroup7", 1)[0].startswith("OK, I'll remind you ")
    assert api.wait_sent(user, 2)[1] == "⏰ Reminder: drink water"
    assert api.wait_sent("chat:wrGroup7", 2)[1] == "⏰ Reminder for WangWu: stand-up meeting"
    time.sleep(1.5)
    assert len(api.sent_to(user)) == 2 and len(api.sent_to("chat:wrGroup7")) == 2


def test_kill_9_mid_turn_is_answered_once_after_restart(servers, tmp_path):
    api, llm = servers
    bot, wecom = start(tmp_path, api, llm)
    wecom.text(USER, "first")
    api.wait_sent(USER, 1)
    llm.latency = 5.0
    requests = len(llm.requests)
    _, response = wecom.text(USER, "slow")
    assert response.status_code == 200  # answered at once, before the model
    llm.wait_for_requests(requests + 1, timeout=15)
    bot.kill()
    llm.latency = 0.0
    bot.start()
    api.wait_sent(USER, 2, timeout=30)
    wecom.text(USER, "after")
    api.wait_sent(USER, 3)
    time.sleep(1.0)
    assert api.sent_to(USER) == ["echo: first", "> slow\n\necho: slow", "echo: after"]  # a resumed answer quotes it
    assert bot.stop() == 0


def test_a_photo_reaches_the_model_and_a_voice_message_gets_a_note_or_its_transcript(tmp_path):
    from media.intake import VOICE_FORMAT
    from tests.media.harness import image_parts, jpeg

    with FakeWecomAPI(corp_id=CORP, agent_id=AGENT, secret=SECRET) as api, \
            FakeOpenAIServer(model="gpt-4o-mini") as llm:
        bot, wecom = start(tmp_path, api, llm, model="gpt-4o-mini")
        api.media["photo-1"] = (jpeg(), "image/jpeg")
        api.media["voice-1"] = (b"#!AMR\n fake", "audio/amr")
        llm.enqueue_text("A plain red square.")
        assert wecom.media(USER, "image", "photo-1").status_code == 200
        assert api.wait_sent(USER, 1) == ["A plain red square."]
        parts = image_parts(llm.requests[0])
        assert len(parts) == 1 and parts[0]["image_url"]["url"].startswith("data:image/jpeg;base64,")
        wecom.media(USER, "voice", "voice-1")
        assert api.wait_sent(USER, 2)[1] == VOICE_FORMAT.format(format="AMR")
        wecom.media(USER, "voice", "voice-1", recognition="明天开会")
        assert api.wait_sent(USER, 3)[2] == '(heard: "明天开会")\n\necho: 明天开会'
        assert bot.stop() == 0
        assert "Traceback" not in bot.log()


@pytest.mark.parametrize(("problem", "expected"), [
    ("secret", "errcode 40001"),
    ("ip", "errcode 60020"),
    ("callback", "the callback is not configured: set wecom_token and wecom_aes_key"),
])
def test_setup_mistakes_are_one_line(servers, tmp_path, problem, expected):
    api, llm = servers
    extra = {}
    if problem == "secret":
        extra["wecom_secret"] = "not-the-secret"
    elif problem == "ip":
        api.trusted_ips = {"10.1.2.3"}
    else:
        extra.update(wecom_token="", wecom_aes_key="")
    bot = BotProcess(tmp_path, **settings(api, llm, free_port(), new_aes_key(), **extra))
    bot.start(wait_for_log=None)
    code = bot.proc.wait(30)
    bot.stop()
    err = bot.log()
    assert code != 0
    lines = [line for line in err.splitlines() if expected in line]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    if problem == "secret":
        assert "set wecom_secret" in lines[0]
    if problem == "ip":
        assert "trusted IP" in lines[0]


@pytest.mark.skipif(not TEST_DATABASE_URL, reason="TEST_DATABASE_URL not set (PostgreSQL only)")
def test_three_processes_fetch_the_access_token_once(servers, tmp_path):
    api, llm = servers
    key = new_aes_key()
    with fresh_schema(TEST_DATABASE_URL) as db_url:
        bots, senders = [], []
        for i in range(3):
            folder = tmp_path / f"bot{i}"
            folder.mkdir()
            port = free_port()
            bots.append(BotProcess(folder, **settings(api, llm, port, key, db_url=db_url,
                                                      data_dir=str(tmp_path / "data"))))
            senders.append(CallbackSender(f"http://127.0.0.1:{port}/wecom/callback", TOKEN, key, CORP, AGENT))
        for bot in bots:
            bot.start(wait_for_log=None)
        try:
            for bot in bots:
                bot.wait_for_log("INFO app: ready:", 60)
            for i, sender in enumerate(senders):
                sender.text(f"user{i}", f"hello {i}")
            for i in range(3):
                assert api.wait_sent(f"user{i}", 1, timeout=30) == [f"echo: hello {i}"]
            assert api.tokens_issued == 1, "one gettoken for three processes"
            gets = [q for path, q in api.calls if path == "/cgi-bin/agent/get"]
            assert len(gets) == 3 and len({q["access_token"] for q in gets}) == 1
        finally:
            for bot in bots:
                if bot.pid is not None:
                    bot.stop()
