"""One turn of the tool loop (DESIGN §2, steps 1-4).

The user message is stored before the model is called; every assistant and tool message is stored as
it is produced. The context is prepared before every model call; turns that leave it only move the
session's ``context_start_seq`` and go to the summariser. The turn's arguments travel as one
:class:`~agent.turn.AgentTurn` value. The parts live beside this module: the system prompt and the token
budget in agent/prompt.py, the model call with its streaming, image and deadline recoveries in agent/call.py,
and the staged recovery from a provider's "too long" (§2.3) in agent/overflow.py.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agent.call import STREAM_BROKEN
from agent.completion import parse_arguments
from agent.context import Budget, message_text
from agent.images import REFUSED_NOTE, ImageTurn, Vision, settle_images
from agent.prompt import Prompt
from agent.request import prepare_and_call
from agent.session import FIRST_REPLY_WAIT_SECONDS, DropSink, SessionState
from agent.tokens import TokenCounter, TokenCounters
from agent.tools.base import ToolContext, ToolQuery, ToolRegistry, ToolSet, cap_result
from agent.turn import TURN_DEADLINE, AgentTurn, Deadline, TurnExtras, TurnKnowledge, TurnResult
from agent.window import ModelWindows
from core.llm import BaseLLM, LLMResponse, SlottedLLM, StreamingLLM
from store.store import Store

if TYPE_CHECKING:
    from config.settings import Config

logger = logging.getLogger(__name__)

#: What the user sees when the model's answer has no text to show (DESIGN §2.4: never silence).
EMPTY_REPLY = "The model returned an empty answer. Please try again, or rephrase your message."
REASONING_ONLY_REPLY = ("The model only thought about your message and gave no answer. Please ask again, "
                        "perhaps more directly.")
FILTERED_REPLY = "The model's content filter withheld the answer. Please rephrase your message."
LENGTH_NOTE = "(The answer was cut off at the length limit.)"
LENGTH_EMPTY_REPLY = ("The answer reached the length limit before any of it could be shown. "
                      "Please ask for something shorter.")
#: The reply when even the current turn alone is too long for the model.
CLEARED_REPLY = (
    "This conversation grew too long for the model, even after trimming, so I have cleared its context. "
    "Nothing is lost: earlier messages are saved in this chat's memory. Please send your last message "
    "again, shorter if you can."
)


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
        #: the models' context windows and where they came from (configured, the server, the table)
        self.windows = windows or ModelWindows(config)
        #: which models are sent images (``vision``, the table, the servers' refusals)
        self.vision = vision or Vision(config)
        #: seconds a turn's model calls may take in all (tests shorten it)
        self.turn_deadline = TURN_DEADLINE
        #: ``counter(model)``: the token counter for a model (shared with the summariser in the app)
        self.counter = counter or TokenCounters()
        #: the system prompt (MEMORY.md through ``notes``, PERSON.md through ``person_notes``) and the budgets
        self.prompt = Prompt(config=config, counter=self.counter, windows=self.windows, notes=notes,
                             person_notes=person_notes)
        #: how long the first turn after a restore waits for the summary of the skipped turns
        self.first_reply_wait = FIRST_REPLY_WAIT_SECONDS
        #: (the client, whether it streams, whether it has request slots): a runtime Protocol check walks the
        #: protocol's members each time, so it is made once per client
        self._abilities: tuple[object, bool, bool] | None = None
        #: the knowledge base's part of each turn (DESIGN §14), or None without one
        self.knowledge: TurnKnowledge | None = None

    def abilities(self) -> tuple[bool, bool]:
        """Whether the model client streams (:class:`StreamingLLM`) and has request slots (:class:`SlottedLLM`),
        checked once per client."""
        known = self._abilities
        if known is None or known[0] is not self.llm:
            known = self._abilities = (self.llm, isinstance(self.llm, StreamingLLM), isinstance(self.llm, SlottedLLM))
        return known[1], known[2]

    def model(self, turn: AgentTurn | None = None) -> str:
        """The model of ``turn``: the one it was given, or the configured one."""
        return (turn.model if turn is not None else None) or self.config().model

    # --- the prompt and its room, as /context shows them (agent/prompt.py) ------------------
    def system_prompt(self, state: SessionState, turn: AgentTurn | None = None) -> str:
        """The session's system prompt (with ``turn``'s knowledge base section)."""
        return self.prompt.system(state, turn.extras if turn is not None else None)

    def budget(self, state: SessionState, system_prompt: str, turn: AgentTurn | None = None) -> Budget:
        """The turn and token budgets for the history of a request of ``turn`` (or of a turn now)."""
        return self.prompt.budget(state, system_prompt, self.model(turn), self._offered(turn))

    def overhead(self, state: SessionState, system_prompt: str) -> tuple[int, int]:
        """What every request of this session carries besides its turns, in tokens: the system prompt with the
        injected summary, and the tools' schemas (as :meth:`budget` counts them; /context shows both)."""
        model = self.model()
        return (self.prompt.reserved(state, system_prompt, model),
                self.prompt.tools_tokens(model, self.tools.schemas() or None))

    def _offered(self, turn: AgentTurn | None) -> list[dict[str, Any]] | None:
        """The tools' schemas the next model call offers: the turn's set, or every registered tool."""
        tools = turn.tools if turn is not None else None
        return (tools.schemas() if tools is not None else self.tools.schemas()) or None

    # --- the turn ------------------------------------------------------------------------
    async def run_turn(self, state: SessionState, turn: AgentTurn | None = None) -> TurnResult:
        """Run the tool loop for the newest user message in ``state`` and return the final answer.

        The turn's sink, final-answer callback, model and message come in ``turn`` (:class:`AgentTurn`); the
        agent adds its images, the knowledge base's part, its tools and its deadline. The first turn after a
        restore first waits (briefly) for the summary of the turns it skipped.
        """
        turn = turn or AgentTurn()
        model = self.model(turn)
        images = ImageTurn(send=self.vision.allows(model))
        turn = dataclasses.replace(turn, images=images, extras=await self._knowledge(state))
        await state.wait_ready(self.first_reply_wait)
        turn = dataclasses.replace(turn, tools=await self._turn_tools(state, turn),
                                   deadline=Deadline(self.turn_deadline))
        result = await self._tool_loop(state, turn)
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

    async def _turn_tools(self, state: SessionState, turn: AgentTurn) -> ToolSet:
        """The tools this turn offers (the registry's selector may narrow them to the message, DESIGN §13)."""
        used = frozenset(call.get("function", {}).get("name", "") for m in state.messages
                         for call in m.message.get("tool_calls") or ())
        user = next((m.message for m in reversed(state.messages) if m.message.get("role") == "user"), {})
        text = user.get("content")
        if isinstance(text, list):
            text = " ".join(p.get("text", "") for p in text if isinstance(p, dict))
        model = self.model(turn)
        return await self.tools.for_turn(ToolQuery(
            session_id=state.session_id, info=state.info, text=text if isinstance(text, str) else "", used=used,
            window=self.windows(model), count=self.counter(model).count_text, message=turn.message))

    async def _tool_loop(self, state: SessionState, turn: AgentTurn) -> TurnResult:
        cfg = self.config()
        result = TurnResult(text="")
        while True:
            tools = self._offered(turn)  # find_tools may have offered more since the last call
            final = result.steps >= cfg.agent_max_steps
            response = await prepare_and_call(self, state, turn, result, tools=None if final else tools, final=final)
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
                if turn.images is not None and turn.images.refused:
                    result.text = f"{REFUSED_NOTE}\n\n{result.text}"
                if turn.final is None:
                    await state.add(message)
                else:
                    await turn.final(message, result.text)
                return result
            await state.add(message)
            for call in response.tool_calls:
                result.tool_calls += 1
                if call.error:  # the model's arguments were not JSON: tell it, run nothing
                    content = f"Error: {call.error}. Call the tool again with a JSON object as its arguments."
                else:
                    content = await self._run_tool(state, turn, call.name, call.arguments)
                await state.add({"role": "tool", "tool_call_id": call.id, "content": content})

    async def _run_tool(self, state: SessionState, turn: AgentTurn, name: str, arguments: str) -> str:
        tools = turn.tools or self.tools
        tool = tools.get(name)
        started = time.perf_counter()
        try:
            if tool is None:
                raise LookupError(f"unknown tool {name!r}; available: {', '.join(tools.names())}")
            args = parse_arguments(arguments)
            turns = state.turns()
            ctx = ToolContext(session_id=state.session_id, config=self.config(), info=state.info,
                              data_dir=self.config().data_path(), turn_start_seq=turns[-1].first_seq if turns else 0,
                              message=turn.message, tools=turn.tools)
            text = await tool.call(ctx, args)
        except Exception as exc:  # noqa: BLE001 - a failing tool is reported to the model, the turn goes on
            logger.warning("session %s: tool %s failed: %s", state.session_id, name, exc)
            text = f"Error: {type(exc).__name__}: {exc}"
        logger.debug("tool %s took %.1f ms", name, (time.perf_counter() - started) * 1000)
        return cap_result(text)

    async def clear(self, state: SessionState) -> None:
        """Empty the context by moving the boundary past every stored message. Rows are kept.

        A cleared context starts empty (DESIGN §2.3 step 4): summaries queued before now, such as the
        overflow job, go to memory only, as after ``/context clear``.
        """
        self.sink.note_cleared(state.session_id)  # before any await: a summary finishing meanwhile must not inject
        await state.clear()
