"""One model call of a turn, start to end: the context prepared for it, the call, the recovery from "too long".

Before every call the context is prepared (DESIGN §2.1): turns past the budget leave it (with ``memory_flush``
they are saved first) and go to the summariser; the group's background and the knowledge base's passages get
what the turns leave. The call itself, with its streaming, image and deadline recoveries, is agent/call.py's;
a provider's "too long" goes to the staged recovery of agent/overflow.py, and past its last stage the context
is cleared.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast

from agent.call import call_model
from agent.context import Budget, PrepareResult, fit_background, fit_passages, prepare_context, render_messages
from agent.flush import flush_before_trim
from agent.images import request_messages
from agent.overflow import recover
from agent.slots import urgent
from agent.tools.base import ToolContext
from core.errors import ContextOverflowError
from core.llm import BaseLLM, LLMResponse, SlottedLLM
from core.usage import usage_scope

if TYPE_CHECKING:
    from agent.images import Vision
    from agent.prompt import Prompt
    from agent.session import DropSink, SessionState
    from agent.tokens import TokenCounter
    from agent.tools.base import ToolRegistry
    from agent.turn import AgentTurn, TurnResult
    from agent.window import ModelWindows
    from config.settings import Config

logger = logging.getLogger(__name__)

#: Appended (never stored) to the last request of a turn that reached ``agent_max_steps``.
FINAL_ANSWER_PROMPT = (
    "You have reached the limit of tool calls for this message. Do not call any more tools. "
    "Answer the user now, as well as you can with the information you already have."
)


class Agent(Protocol):
    """What a request uses of the agent (agent/loop.py ``Agent``)."""

    llm: BaseLLM
    tools: ToolRegistry
    config: Callable[[], Config]
    sink: DropSink
    windows: ModelWindows
    vision: Vision
    counter: Callable[[str], TokenCounter]
    prompt: Prompt

    def abilities(self) -> tuple[bool, bool]: ...

    def model(self, turn: AgentTurn | None = None) -> str: ...

    def system_prompt(self, state: SessionState, turn: AgentTurn | None = None) -> str: ...

    def budget(self, state: SessionState, system_prompt: str, turn: AgentTurn | None = None) -> Budget: ...

    async def clear(self, state: SessionState) -> None: ...


async def prepare_and_call(agent: Agent, state: SessionState, turn: AgentTurn, result: TurnResult, *, tools,
                           final: bool) -> LLMResponse | None:
    """Prepare the context and call the model, with overflow recovery. None means the context was cleared.

    While it runs, a free slot of a one-request server is kept for this reply: the summary its trim starts
    waits until the reply is done (agent/slots.py).
    """
    slots = cast(SlottedLLM, agent.llm).slots if agent.abilities()[1] else None
    # Not urgent() here: the summary worker a trim starts would inherit it (tasks copy the context).
    with slots.reply_coming() if slots is not None else contextlib.nullcontext():
        return await _prepare_and_call(agent, state, turn, result, tools=tools, final=final)


async def _prepare_and_call(agent: Agent, state: SessionState, turn: AgentTurn, result: TurnResult, *, tools,
                            final: bool) -> LLMResponse | None:
    request = TurnRequest(agent, state, turn, agent.system_prompt(state, turn), tools, final)
    counter = agent.counter(request.model)
    budget = request.budget()
    prepared = prepare_context(state.messages, budget, counter)
    if prepared.dropped and agent.config().memory_flush:
        with urgent():  # part of the reply's turn: it must not wait for the reply to come
            await _flush(agent, state, prepared, request.system, request.model)
    await apply(agent, state, prepared, "trim")
    result.actions.extend(prepared.actions)
    # The group's background gets what the turns leave of the budget: it yields first (DESIGN §1.3).
    background, background_tokens = fit_background(state.background, budget.max_tokens - prepared.tokens, counter)
    extras = turn.extras
    if extras is not None and extras.passages:  # knowledge_auto: what is left of the budget, best first
        passages, passage_tokens = fit_passages(list(extras.passages),
                                                budget.max_tokens - prepared.tokens - background_tokens, counter)
        if passages:
            background = f"{passages}\n\n{background}" if background else passages
            background_tokens += passage_tokens
    try:
        return await request.attempt(prepared.tokens + background_tokens, background)
    except ContextOverflowError as exc:
        logger.warning("session %s: the model rejected the context as too long: %s", state.session_id, exc)
        learned = request.learn(exc, prepared.tokens + background_tokens)
    response = await recover(state, request, learned=learned, counter=counter, sink=agent.sink,
                             actions=result.actions)
    if response is None:
        await agent.clear(state)
    return response


@dataclasses.dataclass(slots=True)
class TurnRequest:
    """One request of a turn: its system prompt and tools, called again on whatever context the overflow
    recovery leaves (agent/overflow.py ``Request``)."""

    agent: Agent
    state: SessionState
    turn: AgentTurn
    system: str
    tools: list[dict[str, Any]] | None
    final: bool
    model: str = ""

    def __post_init__(self) -> None:
        self.model = self.agent.model(self.turn)

    def budget(self) -> Budget:
        return self.agent.budget(self.state, self.system, self.turn)

    async def apply(self, prepared: PrepareResult) -> None:
        await apply(self.agent, self.state, prepared, None)

    async def attempt(self, history_tokens: int, background: str = "") -> LLMResponse:
        agent, state, turn = self.agent, self.state, self.turn
        cap = agent.prompt.answer_cap(state, self.system, self.model, history_tokens, self.tools)
        messages = render_messages(self.system, state.messages, state.summary, state.summary_turns, background)
        images = turn.images
        send = images is not None and images.send and not images.refused
        messages, sent = request_messages(messages, agent.config().data_path(), send)
        if sent and images is not None:
            images.sent = True
        if self.final:
            messages.append({"role": "system", "content": FINAL_ANSWER_PROMPT})
        return await call_model(agent.llm, turn, messages, tools=self.tools, model=self.model, max_tokens=cap,
                                streams=agent.abilities()[0], vision=agent.vision)

    def learn(self, error: ContextOverflowError, history_tokens: int) -> bool:
        sent = self.agent.prompt.request_tokens(self.state, self.system, self.model, history_tokens, self.tools)
        return self.agent.windows.learn_from_error(self.model, str(error), sent)


async def apply(agent: Agent, state: SessionState, result: PrepareResult, reason: str | None) -> None:
    """Make a prepared context the session's context; move the boundary past dropped turns (and, with a
    ``reason``, hand them to the summariser)."""
    if result.dropped:
        first = min(t.first_seq for t in result.dropped if t.first_seq)
        last = max(t.last_seq for t in result.dropped)
        await state.apply(result.messages, next((m.seq for m in result.messages if m.seq), last + 1))
        if reason is not None:
            await agent.sink.submit(state.session_id, reason, first, last)
    else:
        await state.apply(result.messages)
    for action in result.actions:
        logger.info("session %s: %s", state.session_id, action)


async def _flush(agent: Agent, state: SessionState, prepared: PrepareResult, system: str, model: str) -> None:
    """``memory_flush``: before turns leave the context, one model call saves what matters with
    memory_write (agent/flush.py); it answers nobody, and its cost is logged there."""
    write = agent.tools.get("memory_write")
    if write is None:
        logger.warning("session %s: memory_flush is on but no memory_write tool is registered", state.session_id)
        return
    cfg = agent.config()
    ctx = ToolContext(session_id=state.session_id, config=cfg, data_dir=cfg.data_path())

    async def write_note(text: str) -> str:
        return await write.call(ctx, {"text": text})

    with usage_scope(purpose="flush"):  # counted apart from the reply (DESIGN §1.7)
        await flush_before_trim(agent.llm, [m.message for turn in prepared.dropped for m in turn.messages],
                                write_note, model=model, system=system, session_id=state.session_id)
