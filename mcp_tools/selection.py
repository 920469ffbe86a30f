"""Each turn's tools: the registered ones plus the MCP tools its chat may use, narrowed when they are many
(DESIGN §13).

The tools' schemas go with every request, so they count in the token budget (the agent counts the set this
returns). While they take at most ``tools_window_share`` of the model's window, every tool is offered. Above
it, the turn offers ``find_tools``, the tools its session's kept turns used, and then the tools most relevant
to the message, as many as fit in that share: relevance is the embedding model's similarity
(``memory_embedding_model``; ``"local"`` runs on this machine) between the message and each tool's name and
description, or shared words when there is no embedding model. ``find_tools(query)`` ranks the others the
same way, returns the best matches' names and descriptions, and offers them from the turn's next model call,
still within the share (the least relevant offered tools make room).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agent.tools.base import Tool, ToolContext, ToolQuery, ToolRegistry, ToolSet
from mcp_tools.manager import McpManager

if TYPE_CHECKING:
    import numpy as np

    from config.settings import Config
    from memory.embeddings import BaseEmbedder

logger = logging.getLogger(__name__)

FIND_TOOLS = "find_tools"
#: ``find_tools`` returns at most this many matches.
FOUND = 5
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


class Ranker:
    """Orders tools by relevance to a text: embedding similarity, or shared words while there is no embedder or
    the tools' vectors are still being computed (:meth:`warm` computes them in the background, so no turn waits
    for a hundred descriptions to be embedded)."""

    def __init__(self, embedder: Callable[[], BaseEmbedder | None]) -> None:
        self._embedder = embedder
        self._vectors: dict[str, np.ndarray] = {}
        self._failed = False
        self._warming: asyncio.Task[None] | None = None
        self._wanted: list[str] = []

    def warm(self, tools: list[Tool]) -> None:
        """Compute the vectors of ``tools``' names and descriptions in the background."""
        self._wanted = [_about(t) for t in tools]
        if self._warming is None or self._warming.done():
            self._warming = asyncio.get_running_loop().create_task(self._warm(), name="tool vectors")

    async def warmed(self) -> None:
        """Wait until the background computation is done."""
        while self._warming is not None and not self._warming.done():
            await asyncio.shield(self._warming)

    async def _warm(self) -> None:
        embedder = None if self._failed else self._embedder()
        while embedder is not None:
            missing = [a for a in dict.fromkeys(self._wanted) if a not in self._vectors]
            if not missing:
                return
            try:
                vectors = await embedder.embed(missing)
            except Exception:  # noqa: BLE001 - ranking by words is the fallback; the chat goes on
                logger.warning("embedding the tools' descriptions failed; they are ranked by shared words",
                               exc_info=True)
                self._failed = True
                return
            if len(self._vectors) > 4096:
                self._vectors.clear()
            self._vectors.update(zip(missing, vectors, strict=True))

    def stop(self) -> None:
        """Stop a background computation."""
        if self._warming is not None:
            self._warming.cancel()

    async def rank(self, tools: list[Tool], text: str) -> list[Tool]:
        """``tools``, most relevant to ``text`` first (stable for ties)."""
        if not tools or not text.strip():
            return list(tools)
        scores = await self._similarity(tools, text)
        if scores is None:
            scores = [_overlap(text, _about(t)) for t in tools]
        order = sorted(range(len(tools)), key=lambda i: -scores[i])
        return [tools[i] for i in order]

    async def _similarity(self, tools: list[Tool], text: str) -> list[float] | None:
        embedder = None if self._failed else self._embedder()
        if embedder is None:
            return None
        if any(_about(t) not in self._vectors for t in tools):
            self.warm(tools)  # this turn ranks by words; the next ones by meaning
            return None
        try:
            query = await embedder.embed_query(text[:2000])
        except Exception:  # noqa: BLE001 - ranking by words is the fallback; the turn goes on
            logger.warning("ranking tools with the embedding model failed; ranking by shared words instead",
                           exc_info=True)
            self._failed = True
            return None
        import numpy as np  # the embedding model's vectors: numpy is loaded once they exist, not before

        words = [_overlap(text, _about(t)) for t in tools]
        # similarity first; shared words (a tool named in the message) break near-ties
        return [float(np.dot(self._vectors[_about(t)], query)) + 0.05 * w for t, w in zip(tools, words, strict=True)]


def _about(tool: Tool) -> str:
    return f"{tool.name.replace('__', ' ').replace('_', ' ')}: {tool.description}"


def _overlap(text: str, about: str) -> float:
    words = {w.lower() for w in _WORD.findall(text) if len(w) > 2}
    if not words:
        return 0.0
    theirs = {w.lower() for w in _WORD.findall(about)}
    return len(words & theirs) / len(words)


class NarrowedToolSet(ToolSet):
    """A turn's tools when they were narrowed: ``find_tools`` offers more of them, within the budget."""

    def __init__(self, available: list[Tool], offered: list[str], *, budget: int, cost: Callable[[Tool], int],
                 ranker: Ranker, keep: set[str]) -> None:
        super().__init__(available, offered)
        self.budget = budget
        self.cost = cost
        self.ranker = ranker
        self.keep = keep

    async def find(self, query: str) -> str:
        """The best matches for ``query`` among the tools not offered yet; offered from the next model call."""
        others = [t for name, t in self._available.items() if name not in self._offered]
        found = (await self.ranker.rank(others, query))[:FOUND]
        if not found:
            return "Every tool this chat may use is already offered to you."
        # make room: the least relevant offered tools leave first, never find_tools or the kept turns' tools
        offered = [self._available[n] for n in self._offered]
        ranked = await self.ranker.rank([t for t in offered if t.name not in self.keep], query)
        chosen = [t for t in offered if t.name in self.keep] + found
        room = self.budget - sum(self.cost(t) for t in chosen)
        if room < 0:  # the matches alone are too many: the best ones that fit
            chosen, room = [t for t in offered if t.name in self.keep], self.budget
            for t in found:
                if self.cost(t) <= room - sum(self.cost(c) for c in chosen):
                    chosen.append(t)
            room = self.budget - sum(self.cost(t) for t in chosen)
        for t in ranked:
            if self.cost(t) <= room:
                chosen.append(t)
                room -= self.cost(t)
        names = {t.name for t in chosen}
        self._offered = [n for n in self._available if n in names]
        lines = [f"- {t.name}: {t.description}" + ("" if t.name in names else " (does not fit this model's window)")
                 for t in found]
        return "These tools match and can be called from now on:\n" + "\n".join(lines)


async def _find_tools(ctx: ToolContext, query: str) -> str:
    """Find more tools: the tools offered were narrowed to those relevant to the message; this searches the others
    by what they do and makes the best matches callable.

    Args:
        query: what the tool should do, in a few words
    """
    turn = ctx.tools
    if not isinstance(turn, NarrowedToolSet):
        return "Every tool this chat may use is already offered to you."
    return await turn.find(query)


FIND_TOOLS_TOOL = Tool.from_function(_find_tools, name=FIND_TOOLS)


class McpToolSelector:
    """The tool registry's selector: the registered tools and the chat's MCP tools, narrowed when too many."""

    def __init__(self, manager: McpManager, config: Callable[[], Config],
                 embedder: Callable[[], BaseEmbedder | None]) -> None:
        self.manager = manager
        self.config = config
        self.ranker = Ranker(embedder)
        self._costs: dict[tuple[str, str], int] = {}
        manager.listeners.append(self._tools_changed)

    def _tools_changed(self) -> None:
        """A server's tools changed: their vectors are computed now, before a turn needs them."""
        tools = self.manager.all_tools()
        if tools:
            self.ranker.warm(tools)
        else:  # stopped, or every server down: nothing to compute
            self.ranker.stop()

    async def select(self, registry: ToolRegistry, query: ToolQuery) -> ToolSet:
        """The tools this turn offers (every one while they fit in ``tools_window_share`` of the window)."""
        # The built-in tools count too: on a small window (a local server's 2,048 tokens) their schemas alone take
        # half of it, and the answer would have no room left (DESIGN §13 narrows any tools past the share).
        tools = registry.tools() + self.manager.tools_for(query.info, query.message)
        budget = int(self.config().tools_window_share * query.window) if query.window > 0 else 0

        def cost(tool: Tool) -> int:
            key = (tool.name, tool.description)
            known = self._costs.get(key)
            if known is None:
                if len(self._costs) > 8192:
                    self._costs.clear()
                known = self._costs[key] = query.count(json.dumps(tool.schema()))
            return known

        if budget <= 0 or sum(cost(t) for t in tools) <= budget:  # each tool's schema counted once
            return ToolSet(tools)
        keep = {FIND_TOOLS} | {t.name for t in tools if t.name in query.used}
        chosen = [FIND_TOOLS_TOOL] + [t for t in tools if t.name in keep]
        room = budget - sum(cost(t) for t in chosen)
        for tool in await self.ranker.rank([t for t in tools if t.name not in keep], query.text):
            if cost(tool) <= room:
                chosen.append(tool)
                room -= cost(tool)
        names = {t.name for t in chosen}
        offered = [FIND_TOOLS] + [t.name for t in tools if t.name in names]
        logger.info("session %s: %d of %d tools offered (their schemas fit %.0f%% of the window); find_tools "
                    "offers the others", query.session_id, len(offered) - 1, len(tools),
                    100 * self.config().tools_window_share)
        return NarrowedToolSet([FIND_TOOLS_TOOL, *tools], offered, budget=budget, cost=cost, ranker=self.ranker,
                               keep=keep)


def embedder_for(config: Callable[[], Config]) -> Callable[[], Any]:
    """The embedder ``memory_embedding_model`` names, made on first use (None when it is ``""``)."""
    made: dict[str, Any] = {}

    def get() -> Any:
        cfg = config()
        key = f"{cfg.memory_embedding_model}|{cfg.open_ai_api_base}"
        if key not in made:
            from memory.embeddings import build_embedder

            try:
                made.clear()
                made[key] = build_embedder(cfg.memory_embedding_model, base_url=cfg.open_ai_api_base,
                                           api_key=cfg.open_ai_api_key)
            except Exception:  # noqa: BLE001 - no embedder: words rank the tools
                logger.warning("no embedding model for ranking tools", exc_info=True)
                made[key] = None
        return made[key]

    return get
