"""Tests of channels/wechat/channel.py, offline (tests/channels/wechat_harness.py): login (QR code, refusals, crashes,
a logout from the phone) and the channel's lifecycle (stop, hot reload), each failure one error line."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path
from typing import Any

import itchat
import pytest

from channels.wechat.channel import QR_FILE, STATUS_FILE, WeChatChannel
from config.settings import Config
from tests.channels.wechat_harness import Harness, Login, feed, logs_in, make_core, raw


# --- login and lifecycle -------------------------------------------------------------------------
async def until_logged_in(channel: WeChatChannel) -> None:
    """Wait until the itchat thread has logged in and is receiving."""
    for _ in range(200):
        if channel.logged_in:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not logged in")


async def thread_ended(channel: WeChatChannel) -> None:
    """Wait until the itchat thread has ended by itself (before stop() could end it)."""
    thread = channel._thread
    assert thread is not None
    await asyncio.to_thread(thread.join, 2)
    assert not thread.is_alive()


def channel_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "channels.wechat.channel" and r.levelno >= logging.ERROR]


async def test_login_sys_exit_is_one_error_line(cfg: Config, caplog: pytest.LogCaptureFixture) -> None:
    core = make_core(Login("7"))

    def auto_login(**kwargs: Any) -> None:
        raise SystemExit  # what itchat does when it cannot reach WeChat

    core.auto_login = auto_login
    channel = WeChatChannel(cfg, core=core)
    await channel.start()
    await thread_ended(channel)
    await asyncio.sleep(0)  # the failure is reported to the loop
    assert channel.failed.is_set()  # the app exits when no other channel can run
    assert channel.failure == "login failed: cannot reach the WeChat servers (itchat gave up)"
    await channel.stop()
    await channel.stop()  # idempotent
    errors = channel_errors(caplog)
    assert len(errors) == 1
    assert errors[0].startswith("wechat: login failed: cannot reach the WeChat servers")
    assert errors[0].endswith("the wechat channel is off; other channels keep running")


async def test_login_against_unreachable_server_is_one_error_line(
        cfg: Config, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real auto_login, pointed at a closed local port: itchat's test_connect fails and calls sys.exit()."""
    monkeypatch.setattr(itchat.config, "BASE_URL", "http://127.0.0.1:9")
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    channel = WeChatChannel(cfg, core=make_core(Login("8")))
    await channel.start()
    await channel.stop()
    assert channel_errors(caplog) == [
        "wechat: login failed: cannot reach the WeChat servers (itchat gave up); "
        "the wechat channel is off; other channels keep running"]


async def test_refused_web_login_is_one_error_line(cfg: Config, caplog: pytest.LogCaptureFixture) -> None:
    core = make_core(Login("9"))
    core.auto_login = lambda **kwargs: None  # itchat's login() returns without logging in when WeChat refuses
    channel = WeChatChannel(cfg, core=core)
    await channel.start()
    await thread_ended(channel)
    await asyncio.sleep(0)
    assert channel.failure is not None and channel.failure.startswith("login failed: WeChat refused the web login")
    await channel.stop()
    errors = channel_errors(caplog)
    assert len(errors) == 1 and errors[0].startswith("wechat: login failed: WeChat refused the web login")


async def test_login_crash_is_one_error_line(cfg: Config, caplog: pytest.LogCaptureFixture) -> None:
    core = make_core(Login("a"))

    def auto_login(**kwargs: Any) -> None:
        raise ConnectionError("network is unreachable")

    core.auto_login = auto_login
    channel = WeChatChannel(cfg, core=core)
    await channel.start()
    await channel.stop()
    assert channel_errors(caplog) == [
        "wechat: stopped by ConnectionError: network is unreachable; "
        "the wechat channel is off; other channels keep running"]


async def test_qr_login_saves_png_shows_qr_and_stop_aborts(
        cfg: Config, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    """start() returns while the QR login waits; stop() ends the wait; nothing is logged as an error."""
    core = make_core(Login("b"))
    waiting = threading.Event()
    seen: dict[str, Any] = {}

    def auto_login(**kwargs: Any) -> None:
        seen.update(kwargs)
        kwargs["qrCallback"](uuid="QRUUID", status="0", qrcode=b"\x89PNG fake")
        waiting.set()
        while True:  # itchat polls check_login and calls qrCallback with each status
            kwargs["qrCallback"](uuid="QRUUID", status="408", qrcode=b"\x89PNG fake")
            time.sleep(0.01)

    core.auto_login = auto_login
    channel = WeChatChannel(cfg, core=core)
    await channel.start()  # returns while the login waits for a scan forever (auto_login above never ends)
    assert await asyncio.to_thread(waiting.wait, 2)
    data = Path(cfg.data_dir)
    assert (data / QR_FILE).read_bytes() == b"\x89PNG fake"
    assert seen["hotReload"] is True and seen["statusStorageDir"] == str(data / STATUS_FILE)
    assert seen["picDir"] == str(data / QR_FILE) and seen["enableCmdQR"] == 2
    await channel.stop()
    out = capsys.readouterr()
    assert "█" in out.out + out.err  # the QR code was drawn on the terminal
    assert channel_errors(caplog) == []
    assert any("https://login.weixin.qq.com/l/QRUUID" in r.getMessage() for r in caplog.records)


async def test_stop_keeps_login_for_hot_reload(h1: Harness) -> None:
    login = h1.login  # type: ignore[attr-defined]
    feed(h1.core, raw(login.alice, login.bot, "hi"))
    await h1.next()
    await h1.channel.stop()
    assert h1.core.alive is False and not h1.channel.logged_in
    assert len(await asyncio.to_thread(h1.channel.status_path.read_bytes)) > 0
    await h1.channel.stop()  # idempotent


async def test_stop_without_hot_reload_logs_out(tmp_path: Path) -> None:
    core = make_core(Login("c"))
    logs_in(core)
    logouts = []

    def logout() -> None:
        logouts.append(core.alive)
        core.alive = False

    core.logout = logout
    channel = WeChatChannel(Config(data_dir=str(tmp_path), wechat_hot_reload=False), core=core)
    await channel.start()
    await until_logged_in(channel)
    started = time.monotonic()
    await channel.stop()
    assert time.monotonic() - started < 1.0  # the wake-up message ends configured_reply's 1 s wait
    assert logouts == [True]
    assert not (tmp_path / STATUS_FILE).exists()


async def test_logged_out_from_phone_is_one_error_line(cfg: Config, caplog: pytest.LogCaptureFixture) -> None:
    core = make_core(Login("d"))
    logs_in(core)
    channel = WeChatChannel(cfg, core=core)
    await channel.start()
    await until_logged_in(channel)
    core.alive = False  # itchat's receiving loop ends like this, then calls exitCallback
    channel._wake()
    await thread_ended(channel)
    await channel.stop()
    errors = channel_errors(caplog)
    assert len(errors) == 1 and errors[0].startswith("wechat: logged out")


def offline_login_steps(core: Any, monkeypatch: pytest.MonkeyPatch, statuses: list[str]) -> list[str]:
    """Run itchat's real auto_login/login offline: only its network steps are swapped on the instance."""
    monkeypatch.setattr("itchat.components.register.test_connect", lambda retryTime=5: True)
    checks: list[str] = []

    def get_qr_uuid() -> str:
        core.uuid = "REALUUID"
        return core.uuid

    def check_login(uuid: str | None = None) -> str:
        status = statuses.pop(0) if statuses else "408"
        checks.append(status)
        if status == "400":
            core.isLogging = False  # what process_login_info does when the account may not use web WeChat
        time.sleep(0.01)
        return status

    core.get_QRuuid = get_qr_uuid
    core.check_login = check_login
    return checks


async def test_real_itchat_login_draws_qr_and_stop_aborts_it(
        cfg: Config, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.INFO, logger="channels.wechat.channel")
    core = make_core(Login("e"))
    core.storageClass.userName = None  # not logged in yet
    checks = offline_login_steps(core, monkeypatch, ["408", "201", "408"])
    channel = WeChatChannel(cfg, core=core)
    await channel.start()
    qr = channel.qr_path
    for _ in range(200):
        if len(checks) >= 3:
            break
        await asyncio.sleep(0.01)
    png = await asyncio.to_thread(qr.read_bytes)
    assert png.startswith(b"\x89PNG")  # itchat's own QR image, saved in data_dir
    await channel.stop()
    out = capsys.readouterr()
    assert "▀" in out.out + out.err
    messages = [r.getMessage() for r in caplog.records if r.name == "channels.wechat.channel"]
    assert any("https://login.weixin.qq.com/l/REALUUID" in m and str(qr) in m for m in messages)
    assert "wechat: QR code scanned; confirm the login on the phone" in messages
    assert "wechat: login stopped" in messages
    assert channel_errors(caplog) == []
    assert channel.failure is None and not channel.failed.is_set()  # stopped, not failed


async def test_real_itchat_login_refused_is_one_error_line(
        cfg: Config, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    core = make_core(Login("f"))
    offline_login_steps(core, monkeypatch, ["201", "400"])
    channel = WeChatChannel(cfg, core=core)
    await channel.start()
    await thread_ended(channel)
    await channel.stop()
    errors = channel_errors(caplog)
    assert len(errors) == 1 and errors[0].startswith("wechat: login failed: WeChat refused the web login")
    assert core.alive is False


async def test_stop_does_not_wait_forever_for_a_stuck_login(
        cfg: Config, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("channels.wechat.channel.JOIN_TIMEOUT_S", 0.1)
    core = make_core(Login("0"))
    release = threading.Event()
    core.auto_login = lambda **kwargs: release.wait(5)  # a request to WeChat that hangs
    channel = WeChatChannel(cfg, core=core)
    await channel.start()
    thread = channel._thread
    started = time.monotonic()
    await channel.stop()
    assert time.monotonic() - started < 1.0
    assert any(r.levelno == logging.WARNING and "did not end within" in r.getMessage() for r in caplog.records)
    assert channel_errors(caplog) == []
    release.set()
    assert thread is not None
    await asyncio.to_thread(thread.join, 2)
    assert not thread.is_alive()
