"""mcp_tools/selection.py: a turn's tools, narrowed to the relevant ones within ``tools_window_share`` of the
window, and ``find_tools``, with the fake server's 100 tools and the local embedding model."""

from __future__ import annotations

import json

import pytest
import pytest_asyncio

from agent.tokens import TokenCounters
from agent.tools.base import ToolContext, ToolQuery, ToolRegistry
from agent.tools.current_time import current_time
from config.settings import ConfigHolder, validate_data
from core.records import SessionInfo
from mcp_tools.manager import McpManager
from mcp_tools.selection import FIND_TOOLS, McpToolSelector, NarrowedToolSet
from memory.embeddings import LocalEmbedder
from tests.mcp_tools.conftest import fake_stdio

CHAT = SessionInfo("telegram:9", "telegram", "9", "9")
COUNT = TokenCounters()("gpt-4o-mini").count_text
#: one server for the module: its tests share its event loop
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def many():
    entry = fake_stdio("--many", "100", chats=[CHAT.session_id])
    holder = ConfigHolder(validate_data({"mcp_servers": {"many": entry}}))
    mgr = McpManager(holder)
    await mgr.start()
    assert len(mgr.servers["many"].tools) == 108
    yield mgr
    await mgr.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def local(many) -> McpToolSelector:
    """A selector ranking with the local model, once the tools' vectors are computed (in the background)."""
    selector = McpToolSelector(many, many.config, LocalEmbedder)
    await selector.select(registry(), query("anything"))  # a first turn ranks by words and starts the vectors
    await selector.ranker.warmed()
    return selector


def registry() -> ToolRegistry:
    return ToolRegistry([current_time])


def query(text: str, window: int = 4096, used: frozenset[str] = frozenset()) -> ToolQuery:
    return ToolQuery(session_id=CHAT.session_id, info=CHAT, text=text, used=used, window=window, count=COUNT)


def tokens(schemas) -> int:
    return COUNT(json.dumps(schemas))


@pytest.mark.parametrize("words", [False, True], ids=["local model", "shared words"])
async def test_many_tools_on_a_small_window_offer_the_relevant_ones_within_the_share(many, local, words) -> None:
    selector = McpToolSelector(many, many.config, lambda: None) if words else local
    turn = await selector.select(registry(), query("Please convert 20 euros into dollars",
                                                   used=frozenset({"many__tool_007"})))
    assert isinstance(turn, NarrowedToolSet)
    names = turn.names()
    assert names[0] == FIND_TOOLS and "many__convert_currency" in names and "many__tool_007" in names
    assert len(names) < 40
    assert tokens(turn.schemas()) <= 0.15 * 4096
    assert turn.get("many__tool_099") is not None  # callable, if the model names it anyway
    # a large window: everything, no find_tools
    full = await selector.select(registry(), query("Please convert 20 euros into dollars", window=128_000))
    assert len(full.names()) == 109 and FIND_TOOLS not in full.names()


async def test_find_tools_offers_the_matches_from_the_next_call_within_the_share(many, local) -> None:
    selector = local
    turn = await selector.select(registry(), query("what is the time in Tokyo?"))
    assert "many__tool_002" not in turn.names()
    find = turn.get(FIND_TOOLS)
    assert find is not None
    text = await find.call(ToolContext(session_id=CHAT.session_id, config=many.config(), tools=turn),
                           {"query": "tide tables of a harbour"})
    assert text.splitlines()[1] == "- many__tool_002: Look up tide tables of a harbour."
    assert "many__tool_002" in turn.names() and turn.names()[0] == FIND_TOOLS
    assert tokens(turn.schemas()) <= 0.15 * 4096


async def test_without_mcp_tools_for_the_chat_the_registry_is_offered_as_it_is(many) -> None:
    selector = McpToolSelector(many, many.config, lambda: None)
    stranger = SessionInfo("telegram:group:-5", "telegram", "-5", "", is_group=True)
    turn = await selector.select(registry(), ToolQuery(session_id=stranger.session_id, info=stranger, window=4096,
                                                       count=COUNT))
    assert turn.names() == ["current_time"]
