"""One turn of the tool loop (DESIGN §2, steps 1-4).

The user message is stored before the model is called; every assistant and tool message is stored as
it is produced. The context is prepared before every model call; turns that leave it only move the
session's ``context_start_seq`` and go to the summariser. A provider "too long" triggers the staged
overflow recovery of §2.3.

Given an :class:`AnswerSink` (``stream_replies``) and a model client that can stream, each model call
streams: visible text goes to the sink as it arrives; text of a call that ends in tool calls is
discarded as an answer. A stream that breaks after text was shown ends the turn with that text and
:data:`STREAM_BROKEN_NOTE`, stored as the answer, instead of an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

from agent.completion import parse_arguments
from agent.context import (
    Budget,
    PrepareResult,
    fit_background,
    fit_passages,
    history_budget,
    message_text,
    overflow_trim,
    prepare_context,
    render_messages,
)
from agent.flush import flush_before_trim
from agent.images import REFUSED_NOTE, ImageTurn, Vision, has_image, request_messages, settle_images, without_images
from agent.session import FIRST_REPLY_WAIT_SECONDS, DropSink, SessionState
from agent.slots import urgent
from agent.tokens import TokenCounter, TokenCounters, output_cap
from agent.tools.base import TURN_MESSAGE, TURN_TOOLS, ToolContext, ToolQuery, ToolRegistry, ToolSet, cap_result
from agent.window import ModelWindows
from core.errors import ContextOverflowError, ImagesUnsupportedError, TransientLLMError
from core.llm import BaseLLM, LLMResponse, ReplySlots, SlottedLLM, StreamingLLM
from core.turns import Turn
from core.usage import usage_scope
from memory.person import prompt_person
from store.store import Store

if TYPE_CHECKING:
    from config.settings import Config

logger = logging.getLogger(__name__)

#: Appended (never stored) to the last request of a turn that reached ``agent_max_steps``.
FINAL_ANSWER_PROMPT = (
    "You have reached the limit of tool calls for this message. Do not call any more tools. "
    "Answer the user now, as well as you can with the information you already have."
)
#: What the user sees when the model's answer has no text to show (DESIGN §2.4: never silence).
EMPTY_REPLY = "The model returned an empty answer. Please try again, or rephrase your message."
REASONING_ONLY_REPLY = ("The model only thought about your message and gave no answer. Please ask again, "
                        "perhaps more directly.")
FILTERED_REPLY = "The model's content filter withheld the answer. Please rephrase your message."
LENGTH_NOTE = "(The answer was cut off at the length limit.)"
LENGTH_EMPTY_REPLY = ("The answer reached the length limit before any of it could be shown. "
                      "Please ask for something shorter.")
#: Appended to an answer whose stream broke after part of it was shown (stored with it).
STREAM_BROKEN_NOTE = "(The answer was cut off: the connection to the model broke. Please ask again for the rest.)"
#: Overflow recovery keeps this many turns at each stage, then clears the context.
OVERFLOW_STAGES = (5, 2, 1)
#: Fitting a refused request to the window its error named cuts the user's text down to this many characters
#: (the usual floor is 1,000: on a 2,048-token window a long Chinese message cut to it still leaves no room
#: for an answer).
OVERFLOW_MIN_USER_CHARS = 200
#: A turn's model calls, tool rounds and retries included, end within this many seconds (DESIGN §2.4): a
#: hung model ends in a short clear message, not minutes of silence. The model client's own retry deadline
#: (agent/llm.py) is shorter, so a long Retry-After ends the call with its own error first.
TURN_DEADLINE = 60.0
#: The reply when even the current turn alone is too long for the model.
CLEARED_REPLY = (
    "This conversation grew too long for the model, even after trimming, so I have cleared its context. "
    "Nothing is lost: earlier messages are saved in this chat's memory. Please send your last message "
    "again, shorter if you can."
)


#: ``finish_reason`` of the answer made from a stream that broke after part of it was shown.
STREAM_BROKEN = "stream_broken"


def reply_outcome(response: LLMResponse) -> str:
    """What the user got, for the turn's log line: ``ok``, or the notice (``empty``, ``cut``, ``filtered``)."""
    text = (response.content or "").strip()
    if response.finish_reason == "length":
        return "cut (length limit)" if text else "empty (length limit)"
    if response.finish_reason == STREAM_BROKEN:
        return "cut (the stream broke)"
    if text:
        return "ok"
    if response.finish_reason == "content_filter":
        return "filtered"
    return "empty (reasoning only)" if response.reasoning_content else "empty"


def reply_text(response: LLMResponse) -> str:
    """What the user sees for a final answer: its text (reasoning never), a note when it was cut at the
    length limit, and a short explanation instead of silence when there is no text."""
    text = (response.content or "").strip()
    if response.finish_reason == "length":
        return f"{text}\n\n{LENGTH_NOTE}" if text else LENGTH_EMPTY_REPLY
    if text:
        return text
    if response.finish_reason == "content_filter":
        return FILTERED_REPLY
    return REASONING_ONLY_REPLY if response.reasoning_content else EMPTY_REPLY


class AnswerSink(Protocol):
    """Where a streamed answer's visible text goes while the model writes it."""

    async def text(self, piece: str) -> None:
        """A new piece of visible text."""
        ...

    async def discard(self) -> None:
        """The pieces so far were not the answer: the model went on to call tools."""
        ...


#: The running turn's sink: set by :meth:`Agent.run_turn` for its own task, read by each model call.
_ANSWER_SINK: ContextVar[AnswerSink | None] = ContextVar("answer_sink", default=None)
#: The model of the running turn when it is not the configured one (``usage_fallback_model`` over a cap).
_TURN_MODEL: ContextVar[str | None] = ContextVar("turn_model", default=None)
#: The running model call's deadline (and its turn), moved on while text streams (:meth:`Agent._not_silent`).
_DEADLINE: ContextVar[tuple[asyncio.Timeout, TurnResult] | None] = ContextVar("model_call_deadline", default=None)
#: The running turn's images (agent/images.py): whether its photo is sent, and whether the server refused it.
_IMAGES: ContextVar[ImageTurn | None] = ContextVar("turn_images", default=None)
#: The running turn's knowledge base part (:class:`TurnKnowledge`): a system prompt section and passages.
_KNOWLEDGE: ContextVar[TurnExtras | None] = ContextVar("turn_knowledge", default=None)


@dataclass(frozen=True, slots=True)
class TurnExtras:
    """What the knowledge base adds to a turn: a system prompt section (which scopes it may search, and to cite),
    and with ``knowledge_auto`` the best passages for the user's message, best first."""

    prompt: str = ""
    passages: tuple[str, ...] = ()


class TurnKnowledge(Protocol):
    """The knowledge base as a turn sees it (knowledge/turn.py, set by the ``knowledge`` plugin)."""

    async def for_turn(self, state: SessionState, text: str) -> TurnExtras: ...


#: ``final(message, text) -> seq``: stores a turn's final answer ``message``, whose reply to the user is
#: ``text``, puts it in the context (through the session handle: :meth:`SessionState.add_answer`) and returns
#: its seq; the dispatcher's keeps ``text`` for its outbox in the same transaction.
FinalAnswer = Callable[[dict[str, Any], str], Awaitable[int]]


@dataclass(slots=True)
class TurnResult:
    """What a turn produced."""

    text: str
    steps: int = 0
    tool_calls: int = 0
    cleared: bool = False
    actions: list[str] = field(default_factory=list)
    #: when the turn's model calls must have ended (event loop time)
    ends: float = float("inf")
    #: what the user got, for the log line (:func:`reply_outcome`; ``cleared`` after an overflow cleared it)
    outcome: str = "ok"


class Agent:
    """Runs turns for sessions: prepares the context, calls the model, runs tools, persists everything."""

    def __init__(
        self,
        *,
        llm: BaseLLM,
        tools: ToolRegistry,
        store: Store,
        config: Callable[[], Config],
        sink: DropSink,
        notes: Callable[[str], str | None] | None = None,
        person_notes: Callable[[str], str | None] | None = None,
        counter: Callable[[str], TokenCounter] | None = None,
        windows: ModelWindows | None = None,
        vision: Vision | None = None,
    ) -> None:
        self.llm = llm
        self.tools = tools
        self.store = store
        self.config = config
        self.sink = sink
        self.notes = notes
        #: ``person_notes(<channel>:<user id>)``: a person's PERSON.md for the prompt (memory/person.py)
        self.person_notes = person_notes
        #: the models' context windows and where they came from (configured, the server, the table)
        self.windows = windows or ModelWindows(config)
        #: which models are sent images (``vision``, the table, the servers' refusals)
        self.vision = vision or Vision(config)
        #: seconds a turn's model calls may take in all (tests shorten it)
        self.turn_deadline = TURN_DEADLINE
        #: ``counter(model)``: the token counter for a model (shared with the summariser in the app)
        self.counter = counter or TokenCounters()
        #: how long the first turn after a restore waits for the summary of the skipped turns
        self.first_reply_wait = FIRST_REPLY_WAIT_SECONDS
        self._prompt_tokens: dict[tuple[str, str], int] = {}
        self._tool_tokens: dict[tuple[str, str], int] = {}
        self._last_tools: tuple[str, list[dict[str, Any]], int] | None = None
        #: (the client, whether it streams, whether it has request slots): a runtime Protocol check walks the
        #: protocol's members each time, so it is made once per client
        self._abilities: tuple[object, bool, bool] | None = None
        #: the knowledge base's part of each turn (DESIGN §14), or None without one
        self.knowledge: TurnKnowledge | None = None

    # --- helpers -------------------------------------------------------------------------
    def _can(self) -> tuple[bool, bool]:
        """Whether the model client streams (:class:`StreamingLLM`) and has request slots (:class:`SlottedLLM`),
        checked once per client."""
        known = self._abilities
        if known is None or known[0] is not self.llm:
            known = self._abilities = (self.llm, isinstance(self.llm, StreamingLLM), isinstance(self.llm, SlottedLLM))
        return known[1], known[2]

    def _slots(self) -> ReplySlots | None:
        """The model endpoint's request slots, when it has any."""
        return cast(SlottedLLM, self.llm).slots if self._can()[1] else None

    def model(self) -> str:
        """The model of the running turn: the configured one, or the one :meth:`run_turn` was given."""
        return _TURN_MODEL.get() or self.config().model

    def system_prompt(self, state: SessionState) -> str:
        """The persona plus the session's long-term notes (MEMORY.md) and, in a private chat or a per-member group
        session, its owner's person notes (PERSON.md), never in a shared group session (DESIGN §1.6). The same
        text every turn while the files are unchanged, so a provider's prompt cache keeps the prefix."""
        prompt = self.config().character_desc
        if self.notes is not None:
            notes = self.notes(state.session_id)
            if notes:
                prompt += "\n\n# Long-term notes for this conversation (MEMORY.md)\n" + notes
        person = prompt_person(state.info) if self.person_notes is not None else None
        if person is not None:
            about = self.person_notes(person)
            if about:
                prompt += ("\n\n# What the person you are talking with asked you to remember about them "
                           "(PERSON.md)\n" + about)
        extras = _KNOWLEDGE.get()
        if extras is not None and extras.prompt:
            prompt += "\n\n" + extras.prompt
        return prompt

    def budget(self, state: SessionState, system_prompt: str) -> Budget:
        """The turn and token budgets for the history of this request."""
        cfg = self.config()
        window = self.windows(self.model())
        # The tools' schemas go with every request: on a small window they are a large share of it.
        reserved = self._reserved(state, system_prompt) + self._tools_tokens(self._offered())
        return Budget(max_turns=cfg.agent_max_context_turns,
                      max_tokens=history_budget(cfg.agent_max_context_tokens, window, reserved))

    def overhead(self, state: SessionState, system_prompt: str) -> tuple[int, int]:
        """What every request of this session carries besides its turns, in tokens: the system prompt with the
        injected summary, and the tools' schemas (as :meth:`budget` counts them; /context shows both)."""
        return self._reserved(state, system_prompt), self._tools_tokens(self.tools.schemas() or None)

    def _reserved(self, state: SessionState, system_prompt: str) -> int:
        """Tokens of the system prompt and the injected summary."""
        model = self.model()
        counter = self.counter(model)
        reserved = self._prompt_tokens.get((model, system_prompt))
        if reserved is None:
            # The persona is the same for every session (MEMORY.md aside): count it once per model.
            reserved = counter.count_text(system_prompt)
            if len(self._prompt_tokens) >= 256:
                self._prompt_tokens.clear()
            self._prompt_tokens[(model, system_prompt)] = reserved
        if state.summary:
            reserved += counter.count_text(state.summary) + 40
        return reserved

    def _request_tokens(self, state: SessionState, system: str, history_tokens: int, tools) -> int:
        """Our count of a request: history, system prompt and summary, tools' schemas."""
        return history_tokens + self._reserved(state, system) + self._tools_tokens(tools)

    def _answer_cap(self, state: SessionState, system: str, history_tokens: int, tools) -> int:
        """``max_tokens`` for this request: ``agent_max_output_tokens``, never more than the window left."""
        cfg = self.config()
        request = self._request_tokens(state, system, history_tokens, tools)
        return output_cap(cfg.agent_max_output_tokens, self.windows(self.model()), request)

    def _tools_tokens(self, tools: list[dict[str, Any]] | None) -> int:
        """Tokens of the tools' schemas in a request (each set counted once per model)."""
        if not tools:
            return 0
        model = self.model()
        last = self._last_tools
        if last is not None and last[0] == model and last[1] is tools:  # a turn's set: the same list each call
            return last[2]
        text = json.dumps(tools)
        tokens = self._tool_tokens.get((model, text))
        if tokens is None:
            if len(self._tool_tokens) >= 64:  # the sets a selector makes vary with the message
                self._tool_tokens.clear()
            tokens = self._tool_tokens[(model, text)] = self.counter(model).count_text(text)
        self._last_tools = (model, tools, tokens)
        return tokens

    def _offered(self) -> list[dict[str, Any]] | None:
        """The tools' schemas the next model call offers: the running turn's set, or every registered tool."""
        turn = TURN_TOOLS.get()
        return (turn.schemas() if turn is not None else self.tools.schemas()) or None

    async def _turn_tools(self, state: SessionState) -> ToolSet:
        """The tools this turn offers (the registry's selector may narrow them to the message, DESIGN §13)."""
        used = frozenset(call.get("function", {}).get("name", "") for m in state.messages
                         for call in m.message.get("tool_calls") or ())
        user = next((m.message for m in reversed(state.messages) if m.message.get("role") == "user"), {})
        text = user.get("content")
        if isinstance(text, list):
            text = " ".join(p.get("text", "") for p in text if isinstance(p, dict))
        model = self.model()
        counter = self.counter(model)
        return await self.tools.for_turn(ToolQuery(
            session_id=state.session_id, info=state.info, text=text if isinstance(text, str) else "", used=used,
            window=self.windows(model), count=counter.count_text))

    async def _apply(self, state: SessionState, result: PrepareResult, reason: str | None) -> None:
        """Make a prepared context the session's context; move the boundary past dropped turns."""
        if result.dropped:
            dropped: list[Turn] = result.dropped
            first = min(t.first_seq for t in dropped if t.first_seq)
            last = max(t.last_seq for t in dropped)
            await state.apply(result.messages, next((m.seq for m in result.messages if m.seq), last + 1))
            if reason is not None:
                await self.sink.submit(state.session_id, reason, first, last)
        else:
            await state.apply(result.messages)
        for action in result.actions:
            logger.info("session %s: %s", state.session_id, action)

    # --- the turn ------------------------------------------------------------------------
    async def add_user_message(self, state: SessionState, text: str) -> None:
        """Store the turn's user message before any model call, and put it in the context."""
        await state.add_user({"role": "user", "content": text})

    async def run_turn(self, state: SessionState, sink: AnswerSink | None = None,
                       final: FinalAnswer | None = None, model: str | None = None) -> TurnResult:
        """Run the tool loop for the newest user message in ``state`` and return the final answer.

        With a ``sink``, model calls stream their visible text into it (when the client can stream). The
        first turn after a restore first waits (briefly) for the summary of the turns it skipped. With
        ``final``, the final answer is stored by that callback (the dispatcher keeps the reply for its outbox
        in the same transaction); without, the agent stores it like any other message. ``model`` runs the turn
        on another model than the configured one (``usage_fallback_model`` when a cap is reached).
        """
        token = _ANSWER_SINK.set(sink)
        model_token = _TURN_MODEL.set(model)
        model = self.model()
        images = ImageTurn(send=self.vision.allows(model))
        image_token = _IMAGES.set(images)
        knowledge_token = _KNOWLEDGE.set(await self._knowledge(state))
        try:
            result = await self._run_turn(state, final)
        finally:
            _KNOWLEDGE.reset(knowledge_token)
            _TURN_MODEL.reset(model_token)
            _ANSWER_SINK.reset(token)
            _IMAGES.reset(image_token)
        # DESIGN §5.1: the turn's photo becomes words before any later request, summary or restart sees it.
        await settle_images(state, images, result.text if result.outcome == "ok" else None, llm=self.llm,
                            model=model, store=self.store, data_dir=self.config().data_path(),
                            vision=self.vision.allows(model))
        return result

    async def _knowledge(self, state: SessionState) -> TurnExtras | None:
        """The knowledge base's part of this turn; None without one, or when it fails (the turn goes on)."""
        if self.knowledge is None:
            return None
        text = next((message_text(m.message) for m in reversed(state.messages)
                     if m.message.get("role") == "user"), "")
        try:
            return await self.knowledge.for_turn(state, text)
        except Exception:  # noqa: BLE001 - the answer does not depend on it
            logger.exception("session %s: the knowledge base's part of the turn failed", state.session_id)
            return None

    async def _run_turn(self, state: SessionState, final_answer: FinalAnswer | None = None) -> TurnResult:
        await state.wait_ready(self.first_reply_wait)
        tools_token = TURN_TOOLS.set(await self._turn_tools(state))
        try:
            return await self._tool_loop(state, final_answer)
        finally:
            TURN_TOOLS.reset(tools_token)

    async def _tool_loop(self, state: SessionState, final_answer: FinalAnswer | None) -> TurnResult:
        cfg = self.config()
        result = TurnResult(text="", ends=asyncio.get_running_loop().time() + self.turn_deadline)
        while True:
            tools = self._offered()  # find_tools may have offered more since the last call
            final = result.steps >= cfg.agent_max_steps
            response = await self._call(state, result, tools=None if final else tools, final=final)
            if response is None:  # the context had to be cleared
                result.text, result.cleared, result.outcome = CLEARED_REPLY, True, "cleared (too long)"
                return result
            result.steps += 1
            message = response.to_message()
            if final:
                message.pop("tool_calls", None)
                message.pop("reasoning_content", None)
            if final or not response.tool_calls:
                result.text, result.outcome = reply_text(response), reply_outcome(response)
                images = _IMAGES.get()
                if images is not None and images.refused:
                    result.text = f"{REFUSED_NOTE}\n\n{result.text}"
                if final_answer is None:
                    await state.add(message)
                else:
                    await final_answer(message, result.text)
                return result
            await state.add(message)
            for call in response.tool_calls:
                result.tool_calls += 1
                if call.error:  # the model's arguments were not JSON: tell it, run nothing
                    content = f"Error: {call.error}. Call the tool again with a JSON object as its arguments."
                else:
                    content = await self._run_tool(state, call.name, call.arguments)
                await state.add({"role": "tool", "tool_call_id": call.id, "content": content})

    async def _run_tool(self, state: SessionState, name: str, arguments: str) -> str:
        tools = TURN_TOOLS.get() or self.tools
        tool = tools.get(name)
        started = time.perf_counter()
        try:
            if tool is None:
                raise LookupError(f"unknown tool {name!r}; available: {', '.join(tools.names())}")
            args = parse_arguments(arguments)
            turns = state.turns()
            ctx = ToolContext(session_id=state.session_id, config=self.config(), info=state.info,
                              data_dir=self.config().data_path(), turn_start_seq=turns[-1].first_seq if turns else 0,
                              message=TURN_MESSAGE.get())
            text = await tool.call(ctx, args)
        except Exception as exc:  # noqa: BLE001 - a failing tool is reported to the model, the turn goes on
            logger.warning("session %s: tool %s failed: %s", state.session_id, name, exc)
            text = f"Error: {type(exc).__name__}: {exc}"
        logger.debug("tool %s took %.1f ms", name, (time.perf_counter() - started) * 1000)
        return cap_result(text)

    def _render(self, state: SessionState, system: str, final: bool, background: str = "") -> list[dict[str, Any]]:
        messages = render_messages(system, state.messages, state.summary, state.summary_turns, background)
        images = _IMAGES.get()
        send = images is not None and images.send and not images.refused
        messages, sent = request_messages(messages, self.config().data_path(), send)
        if sent and images is not None:
            images.sent = True
        if final:
            messages.append({"role": "system", "content": FINAL_ANSWER_PROMPT})
        return messages

    async def _call(self, state: SessionState, result: TurnResult, *, tools, final: bool) -> LLMResponse | None:
        """Prepare the context and call the model, with overflow recovery. None means the context was cleared.

        While it runs, a free slot of a one-request server is kept for this reply: the summary its trim starts
        waits until the reply is done (agent/slots.py).
        """
        slots = self._slots()
        # Not urgent() here: the summary worker a trim starts would inherit it (tasks copy the context).
        with slots.reply_coming() if slots is not None else contextlib.nullcontext():
            return await self._prepare_and_call(state, result, tools=tools, final=final)

    async def _prepare_and_call(self, state: SessionState, result: TurnResult, *, tools,
                                final: bool) -> LLMResponse | None:
        cfg = self.config()
        system = self.system_prompt(state)
        budget = self.budget(state, system)
        prepared = prepare_context(state.messages, budget, self.counter(self.model()))
        if prepared.dropped and cfg.memory_flush:
            with urgent():  # part of the reply's turn: it must not wait for the reply to come
                await self._flush(state, prepared, system)
        await self._apply(state, prepared, "trim")
        result.actions.extend(prepared.actions)
        # The group's background gets what the turns leave of the budget: it yields first (DESIGN §1.3).
        background, background_tokens = fit_background(state.background, budget.max_tokens - prepared.tokens,
                                                        self.counter(self.model()))
        extras = _KNOWLEDGE.get()
        if extras is not None and extras.passages:  # knowledge_auto: what is left of the budget, best first
            passages, passage_tokens = fit_passages(list(extras.passages),
                                                    budget.max_tokens - prepared.tokens - background_tokens,
                                                    self.counter(self.model()))
            if passages:
                background = f"{passages}\n\n{background}" if background else passages
                background_tokens += passage_tokens
        cap = self._answer_cap(state, system, prepared.tokens + background_tokens, tools)
        try:
            return await self._in_time(result, self._complete(
                self._render(state, system, final, background), tools=tools, model=self.model(), max_tokens=cap))
        except ContextOverflowError as exc:
            logger.warning("session %s: the model rejected the context as too long: %s", state.session_id, exc)
            sent = self._request_tokens(state, system, prepared.tokens + background_tokens, tools)
            learned = self.windows.learn_from_error(self.model(), str(exc), sent)
        # DESIGN §2.3: save everything in context to memory, then trim harder, stage by stage.
        if state.messages:
            first = next((m.seq for m in state.messages if m.seq), 0)
            last = max((m.seq for m in state.messages), default=0)
            if first and last:
                await self.sink.submit(state.session_id, "overflow", first, last)
        counter = self.counter(self.model())
        if learned:  # the error named the real window (or count): fit the context to it first (2.1 cuts a long text)
            budget = dataclasses.replace(self.budget(state, system), min_user_chars=OVERFLOW_MIN_USER_CHARS)
            fitted = prepare_context(state.messages, budget, counter)
            await self._apply(state, fitted, None)
            result.actions.append("overflow recovery: fitted to the window the server named")
            cap = self._answer_cap(state, system, fitted.tokens, tools)
            try:
                return await self._in_time(result, self._complete(
                    self._render(state, system, final), tools=tools, model=self.model(), max_tokens=cap))
            except ContextOverflowError as exc:
                logger.warning("session %s: still too long within the window the server named", state.session_id)
                self.windows.learn_from_error(self.model(), str(exc), self._request_tokens(
                    state, system, fitted.tokens, tools))
        for keep in OVERFLOW_STAGES:
            trimmed = overflow_trim(state.messages, keep, counter)
            await self._apply(state, trimmed, None)
            result.actions.append(f"overflow recovery: kept {keep} turn(s)")
            cap = self._answer_cap(state, system, trimmed.tokens, tools)
            try:
                return await self._in_time(result, self._complete(
                    self._render(state, system, final), tools=tools, model=self.model(), max_tokens=cap))
            except ContextOverflowError as exc:
                logger.warning("session %s: still too long with %d turn(s)", state.session_id, keep)
                self.windows.learn_from_error(self.model(), str(exc), self._request_tokens(
                    state, system, trimmed.tokens, tools))
        await self.clear(state)
        return None

    async def _flush(self, state: SessionState, prepared: PrepareResult, system: str) -> None:
        """``memory_flush``: before turns leave the context, one model call saves what matters with
        memory_write (agent/flush.py); it answers nobody, and its cost is logged there."""
        write = self.tools.get("memory_write")
        if write is None:
            logger.warning("session %s: memory_flush is on but no memory_write tool is registered", state.session_id)
            return
        cfg = self.config()
        ctx = ToolContext(session_id=state.session_id, config=cfg, data_dir=cfg.data_path())

        async def write_note(text: str) -> str:
            return await write.call(ctx, {"text": text})

        with usage_scope(purpose="flush"):  # counted apart from the reply (DESIGN §1.7)
            await flush_before_trim(self.llm, [m.message for turn in prepared.dropped for m in turn.messages],
                                    write_note, model=self.model(), system=system, session_id=state.session_id)

    async def _in_time(self, result: TurnResult, call: Any) -> Any:
        """Await a model call within what is left of the turn's deadline; past it, a transient error.

        Only model calls are cut off: what the turn stored so far (its user message, tool results) stays a
        valid context, and the next message of the session starts a fresh turn.
        """
        left = result.ends - asyncio.get_running_loop().time()
        try:
            if left <= 0:
                raise TimeoutError
            async with asyncio.timeout(left) as scope:
                token = _DEADLINE.set((scope, result))
                try:
                    return await call
                finally:
                    _DEADLINE.reset(token)
        except TimeoutError as exc:
            if asyncio.iscoroutine(call):
                call.close()
            raise TransientLLMError(f"no answer within the turn's {self.turn_deadline:.0f} s deadline") from exc

    def _not_silent(self) -> None:
        """Text is streaming into the chat: the user is not waiting in silence (DESIGN §2.4), so the turn's
        deadline moves to at least ``turn_deadline`` after this piece (a slow local model may write for
        minutes; one that stops writing still ends in a clear message)."""
        held = _DEADLINE.get()
        if held is None:
            return
        scope, result = held
        later = asyncio.get_running_loop().time() + self.turn_deadline
        if scope.when() is not None and later > scope.when():
            scope.reschedule(later)
            result.ends = later

    async def _complete(self, messages: list[dict[str, Any]], *, tools, model: str, max_tokens: int) -> LLMResponse:
        """One model call, a reply's: it takes a free slot before summaries (agent/slots.py)."""
        with urgent():
            try:
                return await self._model_call(messages, tools=tools, model=model, max_tokens=max_tokens)
            except ImagesUnsupportedError:
                if not has_image(messages):
                    raise
            # DESIGN §5.1: the server cannot take images for this model: answer without, and remember it.
            self.vision.refuse(model)
            images = _IMAGES.get()
            if images is not None:
                images.refused = True
            return await self._model_call(without_images(messages), tools=tools, model=model, max_tokens=max_tokens)

    async def _model_call(self, messages: list[dict[str, Any]], *, tools, model: str, max_tokens: int) -> LLMResponse:
        """One model call: streamed into the turn's sink when there is one and the client can stream."""
        sink = _ANSWER_SINK.get()
        if sink is None or not self._can()[0]:
            return await self.llm.complete(messages, tools=tools, model=model, max_tokens=max_tokens)
        shown: list[str] = []

        async def on_text(piece: str) -> None:
            shown.append(piece)
            self._not_silent()
            await sink.text(piece)

        try:
            llm = cast(StreamingLLM, self.llm)
            response = await llm.stream(messages, tools=tools, model=model, max_tokens=max_tokens, on_text=on_text)
        except Exception as exc:
            if not shown or isinstance(exc, ContextOverflowError):
                raise
            # The user has seen part of the answer: keep it and say it is cut, rather than an error reply
            # that would stand next to half an answer. What is stored is what the user ends up seeing.
            logger.warning("model stream broke after %d piece(s): %s: %s", len(shown), type(exc).__name__, exc)
            text = "".join(shown).rstrip()
            return LLMResponse(content=f"{text}\n\n{STREAM_BROKEN_NOTE}", finish_reason=STREAM_BROKEN)
        if response.tool_calls and shown:
            await sink.discard()
        return response

    async def clear(self, state: SessionState) -> None:
        """Empty the context by moving the boundary past every stored message. Rows are kept.

        A cleared context starts empty (DESIGN §2.3 step 4): summaries queued before now, such as the
        overflow job, go to memory only, as after ``/context clear``.
        """
        self.sink.note_cleared(state.session_id)  # before any await: a summary finishing meanwhile must not inject
        await state.clear()
