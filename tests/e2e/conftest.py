"""Fixtures shared by the end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.bot_process import RUNNING
from tests.fakes.openai_server import FakeOpenAIServer


@pytest.fixture(autouse=True)
def _no_bot_left_running() -> Iterator[None]:
    """A bot a test started and did not stop (it failed first) is ended after it, not left running into the rest
    of the suite; bots of wider-scoped fixtures, started before the test, are theirs to stop."""
    before = set(RUNNING)
    yield
    for bot in RUNNING - before:
        bot.stop(timeout=10)


@pytest.fixture
def openai_server() -> Iterator[FakeOpenAIServer]:
    """A fake OpenAI-compatible server on 127.0.0.1 for one test (it answers ``echo: <text>``)."""
    with FakeOpenAIServer() as srv:
        yield srv
