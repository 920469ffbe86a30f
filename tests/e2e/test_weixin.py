"""End to end through app.py: the weixin channel against the fake iLink server and the fake OpenAI server."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dispatcher.replies import TEXT_ONLY_REPLY
from media.intake import PHOTO_FAILED
from tests.fakes.bot_process import BotProcess
from tests.fakes.cluster import fresh_schema
from tests.fakes.ilink_server import FakeILink, decode_cursor, encode_cursor
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.telegram_api import FakeTelegramAPI

USER = "alice@im.wechat"
TEST_DATABASE_URL = os.environ.get("TEST_DATABASE_URL", "")


@pytest.fixture
def servers():
    with FakeILink(hold_s=2, qr_hold_s=2) as api, FakeOpenAIServer() as llm:
        yield api, llm


@pytest.fixture(params=[
    "sqlite",
    pytest.param("postgresql", marks=pytest.mark.skipif(not TEST_DATABASE_URL, reason="TEST_DATABASE_URL not set")),
])
def database(request) -> Iterator[dict[str, str]]:
    """The journal on SQLite (the default) and on PostgreSQL: the settings that choose it."""
    if request.param == "sqlite":
        yield {}
        return
    with fresh_schema(TEST_DATABASE_URL) as db_url:
        yield {"db_url": db_url}


def start_bot(folder: Path, api: FakeILink, llm: FakeOpenAIServer, **extra) -> BotProcess:
    return BotProcess(folder, channel_type="weixin", weixin_base_url=api.base_url, open_ai_api_base=llm.base_url,
                      open_ai_api_key="test", data_dir="data", **extra).start()


def log_in(api: FakeILink, codes: int = 1) -> None:
    api.wait_for_qr(codes)
    api.confirm_qr()


def cursor_seq(folder: Path) -> int:
    path = folder / "data" / "weixin_cursor.json"
    return decode_cursor(json.loads(path.read_text())["get_updates_buf"]) or 0 if path.exists() else 0


def wait_for(check, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.05)


def everything_logged(bot: BotProcess, folder: Path) -> str:
    return bot.log() + (folder / "data" / "bot.log").read_text(encoding="utf-8", errors="replace")


def test_qr_that_expires_once_then_answers_in_order_split_and_restart_without_scan(servers, tmp_path):
    api, llm = servers
    bot = start_bot(tmp_path, api, llm)
    api.wait_for_qr(1)
    api.set_qr("expired")
    log_in(api, codes=2)
    llm.latency = 1.0  # a turn long enough for "typing…" to show
    api.push_text(USER, "one")
    api.wait_sent(USER, 1)
    assert (USER, 1) in api.typing
    llm.latency = 0.0
    for text in ("two", "three"):
        api.push_text(USER, text)
    assert api.wait_sent(USER, 3) == ["echo: one", "echo: two", "echo: three"]
    answer = "\n\n".join(f"paragraph {i} " + "x" * 980 for i in range(10))  # about 10,000 characters
    llm.enqueue_text(answer)
    api.push_text(USER, "a long one please")
    pieces = api.wait_sent(USER, 6)[3:]
    assert [len(p) <= 4000 for p in pieces] == [True, True, True]
    assert "\n\n".join(pieces) == answer
    assert bot.stop() == 0
    account = tmp_path / "data" / "weixin_account.json"
    assert account.stat().st_mode & 0o077 == 0
    logged = everything_logged(bot, tmp_path)
    assert "weixin: the QR code expired; here is a fresh one" in logged
    assert api.tokens[0] not in logged and "Traceback" not in logged

    bot.start()
    api.push_text(USER, "four")
    assert api.wait_sent(USER, 7)[-1] == "echo: four"
    assert bot.stop() == 0
    assert len(api.codes) == 2, "the restart needed no scan"
    assert api.tokens[0] not in everything_logged(bot, tmp_path)
    assert api.violations == []


def test_kill_9_mid_turn_is_answered_once_after_restart(servers, database, tmp_path):
    api, llm = servers
    bot = start_bot(tmp_path, api, llm, **database)
    log_in(api)
    api.push_text(USER, "first")
    api.wait_sent(USER, 1)
    llm.latency = 5.0
    requests = len(llm.requests)
    mid = api.push_text(USER, "slow")
    llm.wait_for_requests(requests + 1, timeout=15)
    wait_for(lambda: cursor_seq(tmp_path) >= 2)  # journalled, then confirmed by the saved cursor
    bot.kill()
    llm.latency = 0.0
    bot.start()
    api.push_text(USER, "after")
    api.wait_sent(USER, 3)
    time.sleep(1.0)  # nothing more may come
    # the resumed answer shows the question it answers (WeChat cannot reply to a message)
    assert api.sent_to(USER) == ["echo: first", "> slow\n\necho: slow", "echo: after"]
    assert api.deliveries[str(mid)] == 1, "the cursor was kept: nothing fetched twice"
    assert bot.stop() == 0


def test_a_redelivered_batch_is_not_answered_twice(servers, database, tmp_path):
    api, llm = servers
    bot = start_bot(tmp_path, api, llm, **database)
    log_in(api)
    mid = api.push_text(USER, "once")
    api.wait_sent(USER, 1)
    wait_for(lambda: cursor_seq(tmp_path) >= 1)
    assert bot.stop() == 0
    # A crash after the journal but before the cursor was saved: the old cursor fetches the message again.
    (tmp_path / "data" / "weixin_cursor.json").write_text(json.dumps({"get_updates_buf": encode_cursor(0)}))
    bot.start()
    wait_for(lambda: api.deliveries.get(str(mid)) == 2)
    api.push_text(USER, "next")
    api.wait_sent(USER, 2)
    time.sleep(0.5)
    assert api.sent_to(USER) == ["echo: once", "echo: next"]
    assert bot.stop() == 0
    assert "duplicate weixin message" in everything_logged(bot, tmp_path)


def test_session_ended_by_wechat_means_a_new_qr_then_messages_flow(servers, tmp_path):
    api, llm = servers
    bot = start_bot(tmp_path, api, llm)
    log_in(api)
    api.push_text(USER, "before")
    api.wait_sent(USER, 1)
    api.end_session()
    log_in(api, codes=2)
    api.push_text(USER, "after")
    assert api.wait_sent(USER, 2) == ["echo: before", "echo: after"]
    api.push(USER, [{"type": 4, "file_item": {"media": {"encrypt_query_param": "x", "aes_key": "y"},
                                              "file_name": "notes.pdf", "len": "10"}}])
    assert api.wait_sent(USER, 3)[-1] == TEXT_ONLY_REPLY  # a file is not read (photos and voice are)
    api.push(USER, [{"type": 2, "image_item": {"media": {"encrypt_query_param": "x", "aes_key": "y"}}}])
    assert api.wait_sent(USER, 4)[-1] == PHOTO_FAILED.format(why="the download failed")  # the CDN knows no "x"
    assert bot.stop() == 0
    logged = bot.log()
    assert logged.count("WeChat ended the session (errcode -14)") == 1
    assert all(token not in everything_logged(bot, tmp_path) for token in api.tokens)


def test_an_unreachable_weixin_is_one_line_and_telegram_keeps_running(tmp_path):
    with FakeTelegramAPI(username="fake_bot") as tg, FakeOpenAIServer() as llm:
        bot = BotProcess(tmp_path, channel_type=["telegram", "weixin"], weixin_base_url="http://127.0.0.1:9",
                         telegram_bot_token=tg.token, telegram_base_url=tg.base_url, telegram_rate_limit=False,
                         open_ai_api_base=llm.base_url, open_ai_api_key="test", data_dir="data").start()
        tg.push_text(1001, "hello", user_id=1001, first_name="Alice")
        wait_for(lambda: tg.chat_texts(1001) == ["echo: hello"])
        assert bot.stop() == 0
    weixin_lines = [line for line in bot.log().splitlines() if "weixin:" in line and "WARNING" in line]
    assert len(weixin_lines) == 1 and "does not answer" in weixin_lines[0]


@pytest.mark.skipif(not TEST_DATABASE_URL, reason="TEST_DATABASE_URL not set (PostgreSQL only)")
def test_two_processes_one_polls_and_the_other_takes_over_a_killed_one(servers, tmp_path):
    api, llm = servers
    with fresh_schema(TEST_DATABASE_URL) as db_url:
        settings = {"channel_type": "weixin", "weixin_base_url": api.base_url, "open_ai_api_base": llm.base_url,
                    "open_ai_api_key": "test", "data_dir": str(tmp_path / "data"), "db_url": db_url,
                    "memory_embedding_model": ""}
        bots = []
        for i in range(2):
            (tmp_path / f"bot{i}").mkdir()
            bots.append(BotProcess(tmp_path / f"bot{i}", **settings))
        for bot in bots:
            bot.start(wait_for_log=None)
        try:
            for bot in bots:
                bot.wait_for_log("INFO app: ready:", 60)
            log_in(api)
            for text in ("one", "two"):
                api.push_text(USER, text)
            api.push_text("bob@im.wechat", "hi")
            assert api.wait_sent(USER, 2) == ["echo: one", "echo: two"]
            assert api.wait_sent("bob@im.wechat", 1) == ["echo: hi"]
            wait_for(lambda: sum("weixin: receiving messages" in b.log() for b in bots) == 1)
            leader = next(i for i, b in enumerate(bots) if "weixin: receiving messages" in b.log())
            llm.latency = 5.0
            requests = len(llm.requests)
            api.push_text(USER, "slow")
            llm.wait_for_requests(requests + 1, timeout=15)
            bots[leader].kill()
            llm.latency = 0.0
            other = bots[1 - leader]
            other.wait_for_log("weixin: receiving messages", 60)
            api.push_text(USER, "after")
            api.wait_sent(USER, 4, timeout=60)
            time.sleep(1.0)
            assert api.sent_to(USER) == ["echo: one", "echo: two", "echo: slow", "echo: after"]
            assert len(api.codes) == 1, "the other process used the shared login"
            slow = [r for r in llm.requests if "slow" in json.dumps(r["messages"][-1])]
            assert len(slow) == 2, "asked once by the killed process, once by the one that took over"
        finally:
            for bot in bots:
                if bot.pid is not None:
                    bot.stop()


def test_stopping_while_the_qr_code_waits_is_a_clean_stop(servers, tmp_path):
    api, llm = servers
    bot = start_bot(tmp_path, api, llm)
    api.wait_for_qr(1)
    wait_for(lambda: (tmp_path / "data" / "weixin_qr.png").exists())  # shown, and waiting for the scan
    assert bot.stop() == 0
    assert "Traceback" not in everything_logged(bot, tmp_path)
    assert not (tmp_path / "data" / "weixin_account.json").exists()


def test_photos_and_voice_messages_from_wechat(tmp_path):
    """A photo is fetched from WeChat's CDN (the fake's), decrypted, shown to the model once and kept as words;
    a voice message is read from WeChat's own transcript; one without a transcript (SILK audio) gets a note; an
    MP3 one without a transcript is transcribed at the endpoint."""
    from media.intake import VOICE_FORMAT
    from tests.e2e.test_media import stored
    from tests.fakes.openai_server import message_text
    from tests.media.harness import image_parts, jpeg

    with FakeILink(hold_s=2, qr_hold_s=2) as api, FakeOpenAIServer(model="gpt-4o-mini") as llm:
        bot = start_bot(tmp_path, api, llm, model="gpt-4o-mini")
        try:
            log_in(api)
            llm.enqueue_text("A plain red square.")  # no caption: the answer is the photo's description too
            api.push_image(USER, jpeg(), key_as="item")
            assert api.wait_sent(USER, 1) == ["A plain red square."]
            parts = image_parts(llm.requests[0])
            assert len(parts) == 1 and parts[0]["image_url"]["url"].startswith("data:image/jpeg;base64,")
            assert len(llm.requests) == 1
            api.push_voice(USER, text="明天下午三点开会")
            assert api.wait_sent(USER, 2)[1] == '(heard: "明天下午三点开会")\n\necho: 明天下午三点开会'
            api.push_voice(USER)  # SILK, and WeChat gave no transcript
            assert api.wait_sent(USER, 3)[2] == VOICE_FORMAT.format(format="SILK")
            llm.default_transcript = "an mp3 voice note"
            api.push_voice(USER, data=b"ID3\x03fake mp3", encode_type=7)
            assert api.wait_sent(USER, 4)[3] == '(heard: "an mp3 voice note")\n\necho: an mp3 voice note'
            assert [(t["model"], t["filename"], t["audio"]) for t in llm.transcriptions] == [
                ("whisper-1", "voice.mp3", b"ID3\x03fake mp3")]
            messages = stored(tmp_path, f"weixin:{USER}")
            assert messages[0]["content"] == "[image: A plain red square.]"
            assert messages[2] == {"role": "user", "content": "明天下午三点开会", "voice": True}
            assert "base64" not in json.dumps(messages)
            folder = tmp_path / "data" / "media"
            assert len([p for p in folder.rglob("*") if p.is_file()]) == 1
            api.push_text(USER, "what did I send you?")
            api.wait_sent(USER, 5)
            assert image_parts(llm.requests[-1]) == []
            assert "[image: A plain red square.]" in [message_text(m) for m in llm.requests[-1]["messages"]]
        finally:
            assert bot.stop() == 0
        assert "Traceback" not in bot.log()
        assert api.violations == []


def test_a_later_piece_that_fails_is_sent_again_alone(servers, tmp_path):
    """Issue 40: a 9,000-character answer arrived as 3,993 + 3,993 + 3,975 + 1,030 characters: the 5xx on a
    later piece made the outbox send the whole answer again."""
    api, llm = servers
    bot = start_bot(tmp_path, api, llm)
    try:
        log_in(api)
        api.push_text(USER, "hi")
        api.wait_sent(USER, 1)
        answer = "\n\n".join(f"paragraph {i} " + "x" * 1480 for i in range(6))  # about 9,000 characters
        llm.enqueue_text(answer)
        api.fail_sendmessage = {api.sendmessage_calls + 2}  # the second piece's first try: 502 Bad Gateway
        api.push_text(USER, "a long one please")
        api.wait_sent(USER, 4)
        time.sleep(1.0)  # nothing more may come
        pieces = api.sent_to(USER)[1:]
        assert len(pieces) == 3 and "\n\n".join(pieces) == answer
    finally:
        assert bot.stop() == 0
    assert "reply to weixin:alice@im.wechat failed (ILinkHTTPError: sendmessage: HTTP 502)" in bot.log()
    assert api.violations == []


def test_a_reminder_goes_out_with_the_newest_token_or_waits_for_the_next_message(servers, tmp_path):
    """A reminder is sent with the user's newest context token, not the one of the message that set it; one that
    WeChat refuses (the token used up or a day old: ret -2) is kept, said in one line, and sent when the user
    writes again: never dropped, never retried in a loop."""
    api, llm = servers
    bot = start_bot(tmp_path, api, llm)
    try:
        log_in(api)
        api.push_text(USER, "/remind in 3s stretch your legs")
        assert api.wait_sent(USER, 1)[0].startswith("OK, I'll remind you ")
        setting = api.sent[-1].context_token
        api.push_text(USER, "meanwhile")
        api.wait_sent(USER, 2)
        newest = api.sent[-1].context_token
        api.use_up(setting)  # the token of the message that set the reminder
        assert api.wait_sent(USER, 3)[2] == "⏰ Reminder: stretch your legs"
        assert api.sent[-1].context_token == newest and api.refused == []

        api.push_text(USER, "/remind in 3s drink water")
        api.wait_sent(USER, 4)
        api.age_tokens(25 * 3600)  # a day passes without the user writing
        wait_for(lambda: len(api.refused) == 1)
        time.sleep(3.0)  # several ticks of the reminders job and of the outbox: not retried
        assert len(api.refused) == 1 and len(api.sent_to(USER)) == 4
        api.push_text(USER, "good morning")
        texts = api.wait_sent(USER, 6)[4:]
        assert sorted(texts) == ["echo: good morning", "⏰ Reminder: drink water"]
    finally:
        assert bot.stop() == 0
    logged = everything_logged(bot, tmp_path)
    kept = [line for line in bot.log().splitlines() if "it is kept and sent when they next write" in line]
    assert len(kept) == 1 and "WARNING" in kept[0] and "reminder" in kept[0]
    assert "refused for good" not in logged and "Traceback" not in logged
    assert api.violations == []


def test_weixin_alone_on_a_terminal_banner_qr_one_instruction_line_and_the_number_typed_there(servers, tmp_path):
    """Issue 40: weixin as the only channel printed about 12 raw log lines and no banner, and the scan instruction
    was a WARNING line below the QR code. Now: the banner, the code with one plain line, the number asked for."""
    import pexpect

    from tests.e2e.test_terminal import ANSI, expect, spawn

    api, llm = servers
    child = spawn(tmp_path, llm.base_url, channel_type="weixin", weixin_base_url=api.base_url,
                  web_console_port=0)
    try:
        screen = ANSI.sub("", expect(child, "Scan this QR code"))
        expect(child, r"\r\n")
        assert f"longchat: model gpt-4o-mini at {llm.base_url}\r\n" in screen
        assert f"data folder: {tmp_path / 'data'}\r\n" in screen
        assert "WeChat: not logged in yet; scan the QR code below. Ctrl-C stops." in screen
        assert "▀" in screen or "█" in screen  # the code itself
        # no log line: neither INFO ones nor the weixin channel's (a loaded machine may add apscheduler's WARNING
        # that a reminders look was skipped, which is not this test's business)
        assert " INFO " not in screen and "weixin:" not in screen
        api.wait_for_qr(1)
        api.set_qr("need_verifycode", verify="482913")
        expect(child, "WeChat shows a number on the phone; type it here to connect the bot: ")
        child.send("111111\r")
        expect(child, "The number did not match; type the number WeChat shows on the phone: ")
        child.send("482913\r")
        wait_for(lambda: api.codes[0].reported == "scaned")
        api.set_qr("confirmed")
        expect(child, f"WeChat: logged in as bot {api.bot_id}; the bot answers messages sent to it.")
        api.push_text(USER, "hello")
        assert api.wait_sent(USER, 1) == ["echo: hello"]
        child.sendcontrol("c")
        rest = ANSI.sub("", expect(child, pexpect.EOF))
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert api.codes[0].codes_given == ["111111", "482913"]
    assert " INFO " not in rest and "Traceback" not in rest
    log = (tmp_path / "data" / "bot.log").read_text(encoding="utf-8")
    assert "weixin: scan the QR code with the WeChat app" in log and "INFO app: ready: weixin" in log


def test_the_number_can_be_typed_on_the_web_console(servers, tmp_path):
    import re
    import urllib.request
    from http.cookiejar import CookieJar
    from urllib.parse import urlencode

    from tests.console.conftest import free_port

    api, llm = servers
    port = free_port()
    bot = start_bot(tmp_path, api, llm, web_console_port=port)
    try:
        bot.wait_for_log("web console: http://")
        link = re.search(r"web console: (http://\S+)", bot.log()).group(1)
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
        opener.open(link).read()
        api.wait_for_qr(1)
        api.set_qr("need_verifycode", verify="482913")
        bot.wait_for_log("WeChat shows a number on the phone: type it to connect the bot, on the web console")
        page = opener.open(f"http://127.0.0.1:{port}/weixin").read().decode()
        assert 'action="/weixin/code"' in page
        csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
        form = urlencode({"csrf": csrf, "code": "482913"}).encode()
        opener.open(f"http://127.0.0.1:{port}/weixin/code", data=form).read()
        wait_for(lambda: api.codes[0].reported == "scaned")
        api.set_qr("confirmed")
        bot.wait_for_log("weixin: receiving messages")
        api.push_text(USER, "hi")
        assert api.wait_sent(USER, 1) == ["echo: hi"]
    finally:
        assert bot.stop() == 0
    assert api.codes[0].codes_given == ["482913"]
