"""Fixtures of the channel tests: the offline WeChat harness (tests/channels/wechat_harness.py), and the fake iLink
server for the weixin channel (a module's own ``api`` fixture, as Telegram's, takes its place there)."""

from __future__ import annotations

from pathlib import Path

import pytest

from channels.weixin import channel as weixin_channel
from channels.weixin.login import QrLogin
from config.settings import Config
from core.retry import RECEIVE
from tests.channels.wechat_harness import Harness, Login, logs_in, make_core
from tests.fakes.ilink_server import FakeILink


@pytest.fixture
def cfg(tmp_path: Path) -> Config:
    return Config(data_dir=str(tmp_path))


@pytest.fixture
async def h1(cfg: Config):
    login = Login("1")
    core = make_core(login)
    logs_in(core)
    harness = Harness(core, cfg)
    harness.login = login  # type: ignore[attr-defined]
    await harness.channel.start()
    yield harness
    await harness.channel.stop()


@pytest.fixture
def api(monkeypatch):
    """WeChat's bot API, faked, with the channel's status polls and backoff in tens of milliseconds."""
    monkeypatch.setattr(QrLogin, "poll_interval", 0.02)
    monkeypatch.setattr(weixin_channel.WeixinChannel, "receive_retry", RECEIVE.but(first=0.02, cap=0.05))
    with FakeILink(hold_s=0.3, qr_hold_s=0.3) as server:
        yield server
