"""What a queued message goes through once its turn comes: one ordered tuple of steps, in one place.

Each step is called with the message being answered and the rest of the chain, as aiogram's middlewares
are: it answers (returns an :class:`Answer`) or hands the message on (``await next(answering)``). The order is
:data:`STEPS`:

1. :func:`command`: a command runs (admin and private-chat checks in :func:`dispatcher.handlers.run_command`);
2. :func:`text_only`: a kind of message the bot cannot read gets the "text only" note;
3. :func:`cap_before_media`: a photo or voice note over a usage cap is refused before it is downloaded;
4. :func:`media_note`: a photo or voice note is made ready for its turn, or answered with a note;
5. :func:`agent_turn`: the agent's turn (the "still working" note armed), which always answers.

A new per-message rule is a step put in its place in :data:`STEPS` (a ``Dispatcher``'s ``steps`` may be
replaced whole, for a test or an embedding). Steps were called "stages" in the plan; that word is the
:class:`dispatcher.intake.Stage` of a queued message already.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from agent.loop import Agent
from agent.session import SessionManager
from channels.base import BaseChannel
from core.usage import speaker_of
from dispatcher.admins import Admins
from dispatcher.commands import CommandRegistry
from dispatcher.handlers import CapGate, run_agent, run_command
from dispatcher.hooks import MessageHooks
from dispatcher.intake import MEDIA_KINDS, WorkItem, model_text
from dispatcher.replies import TEXT_ONLY_REPLY, Presence, StreamedReply
from media.intake import MediaIntake
from store.store import Store
from usage.caps import ALLOWED, Turn, UsageCaps

if TYPE_CHECKING:
    from dispatcher.commands import Services


class Parts(Protocol):
    """What the steps use of the dispatcher (read when a step runs: tests and the app may swap a part)."""

    commands: CommandRegistry
    services: Services | None
    admins: Admins
    caps: UsageCaps | None
    media: MediaIntake
    sessions: SessionManager
    agent: Agent
    store: Store
    hooks: MessageHooks


@dataclass(slots=True)
class Answering:
    """A message being answered, as the steps see it."""

    item: WorkItem
    parts: Parts
    channel: BaseChannel | None
    #: the message's content type; ``unfetched <kind>`` for a photo or voice note its channel cannot fetch
    kind: str
    #: the reply streaming into the chat, for an agent turn when ``stream_replies`` is on
    streamed: StreamedReply | None
    #: "typing…" and the "still working" note
    presence: Presence


@dataclass(frozen=True, slots=True)
class Answer:
    """What a step answered: the log line's outcome, the reply (None or empty: none) and the tool calls."""

    outcome: str
    reply: str | None
    tool_calls: int = 0


Next = Callable[[Answering], Awaitable[Answer]]
#: ``step(answering, next)``: answer, or ``await next(answering)``
Step = Callable[[Answering, Next], Awaitable[Answer]]


async def command(a: Answering, next: Next) -> Answer:  # noqa: A002 - the middleware's usual name
    """A command runs; its reply is the answer."""
    item = a.item
    if item.command is None:
        return await next(a)
    p = a.parts
    reply = await run_command(p.commands, item, await p.admins.is_admin_now(item.message), p.services, a.channel)
    return Answer(f"command /{item.command.command}", reply)


async def text_only(a: Answering, next: Next) -> Answer:  # noqa: A002
    """A message that is neither text nor a photo or voice note the channel fetches: the "text only" note."""
    if a.kind != "text" and a.kind not in MEDIA_KINDS:
        return Answer("non-text", TEXT_ONLY_REPLY)
    return await next(a)


async def cap_before_media(a: Answering, next: Next) -> Answer:  # noqa: A002
    """A photo or voice note not yet prepared, over a usage cap: refused before it is downloaded and
    transcribed (which would be spent, and counted, for nothing)."""
    item, caps = a.item, a.parts.caps
    if a.kind not in MEDIA_KINDS or caps is None or not caps.caps() or item.media is not None \
            or item.user_seq is not None or item.user_message is not None:
        return await next(a)
    msg = item.message
    refusal = await caps.refusal(speaker_of(msg.channel, msg.user_id), item.info,
                                 is_admin=await a.parts.admins.is_admin_now(msg))
    if refusal is None:
        return await next(a)
    return Answer(f"{a.kind}: refused before it was fetched (a usage cap)", refusal)


async def media_note(a: Answering, next: Next) -> Answer:  # noqa: A002
    """A photo or voice note made ready for its turn, once (a turn run again after a database outage keeps
    what was made); a note to send instead of a turn when it cannot be."""
    item = a.item
    if a.kind not in MEDIA_KINDS or item.media is not None or item.user_seq is not None \
            or item.user_message is not None:
        return await next(a)  # not media, prepared already, or its user message is stored: the turn reads that
    prepared = await a.parts.media.prepare(item.message, item.text, item.info.session_id, a.channel)
    if prepared.reply is not None:
        return Answer(f"{a.kind}: a note", prepared.reply)
    text = model_text(item.message, prepared.text) if prepared.spoken else prepared.text
    item.text, item.media, item.media_before = text, prepared.keys, prepared.before
    return await next(a)


async def agent_turn(a: Answering, next: Next) -> Answer:  # noqa: A002
    """The agent's turn, the "still working" note armed; the answer (after the media's note, if any)."""
    item, p = a.item, a.parts
    a.presence.still_working()
    reply, tool_calls, outcome = await run_agent(
        item, sessions=p.sessions, agent=p.agent, store=p.store, hooks=p.hooks, sink=a.streamed,
        gate=_capped(p.caps, p.admins) if p.caps is not None else None)
    if item.media_before and reply:
        reply = f"{item.media_before}\n\n{reply}"
    return Answer(outcome, reply, tool_calls)


#: The steps, in order. The last one always answers.
STEPS: tuple[Step, ...] = (command, text_only, cap_before_media, media_note, agent_turn)


async def answer(steps: Sequence[Step], answering: Answering) -> Answer:
    """Run ``answering`` through ``steps``, in order."""

    async def at(index: int, a: Answering) -> Answer:
        if index == len(steps):
            raise LookupError("no step answered the message")
        return await steps[index](a, lambda later: at(index + 1, later))

    return await at(0, answering)


def _capped(caps: UsageCaps | None, admins: Admins) -> CapGate:
    """Around an item's turn: the usage caps' decision (DESIGN §12; admins exempt), and the turn in flight."""

    @contextlib.asynccontextmanager
    async def gate(item: WorkItem) -> AsyncIterator[Turn]:
        if caps is None or not caps.caps():
            yield Turn(ALLOWED)
            return
        msg = item.message
        async with caps.turn(speaker_of(msg.channel, msg.user_id), item.info,
                             is_admin=await admins.is_admin_now(msg)) as turn:
            yield turn

    return gate

