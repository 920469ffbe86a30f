"""Fixtures of the channel tests: the offline WeChat harness (tests/channels/wechat_harness.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.settings import Config
from tests.channels.wechat_harness import Harness, Login, logs_in, make_core


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
