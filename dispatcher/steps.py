"""What a queued message goes through once its turn comes: one ordered tuple of steps, in one place.

Each step is called with the message being answered (an :class:`Answering` value) and the rest of the
chain, as aiogram's middlewares are: it answers (returns an :class:`Answer`) or hands the message on
(``await next(answering)``, maybe with a new :class:`Answering` value: values are never changed). The order
is :data:`STEPS`:

1. :func:`reply_hooks`: the answer, whichever step made it, goes through the ``after_reply`` hooks;
2. :func:`command`: a command runs (admin and private-chat checks in :func:`dispatcher.handlers.run_command`);
3. :func:`text_only`: a kind of message the bot cannot read gets the "text only" note;
4. :func:`cap_before_media`: a photo or voice note over a usage cap is refused before it is downloaded;
5. :func:`media_note`: a photo or voice note is made ready for its turn, or answered with a note;
6. :func:`agent_turn`: the agent's turn (the "still working" note armed), which always answers: the
   ``before_agent`` hooks, the usage caps' decision and the model, in :func:`dispatcher.handlers.run_agent`.

Before the steps, at intake, :func:`dispatcher.intake.evaluate` applies the triggers (it runs synchronously,
so that messages queue in arrival order) and the journal stores the message (``before_agent`` runs there when
the user message is stored with it); after them, :mod:`dispatcher.answering` hands the answer to the outbox.
A new per-message rule is a step put in its place in :data:`STEPS` (a ``Dispatcher``'s ``steps`` may be
replaced whole, for a test or an embedding).

The values: :class:`Answering` is made by :func:`answering` (and handed on changed by :func:`media_note`),
:class:`Answer` only by this module's functions (tests/dispatcher/test_stage_values.py checks both).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from agent.loop import Agent
from agent.sessions import SessionManager
from channels.base import BaseChannel
from core.usage import speaker_of
from dispatcher.admins import Admins
from dispatcher.commands import CommandRegistry
from dispatcher.handlers import CapGate, run_agent, run_command
from dispatcher.hooks import MessageHooks
from dispatcher.intake import MEDIA_KINDS, Accepted, model_text
from dispatcher.journal import Journalled
from dispatcher.replies import TEXT_ONLY_REPLY, Presence, StreamedReply
from media.intake import MediaIntake, Prepared
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


def _noted(prepared: Prepared) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Answering:
    """A message being answered, as the steps see it: its journal value and what its turn has around it."""

    journalled: Journalled
    parts: Parts
    channel: BaseChannel | None
    #: the message's content type; ``unfetched <kind>`` for a photo or voice note its channel cannot fetch
    kind: str
    #: the reply streaming into the chat, for an agent turn when ``stream_replies`` is on
    streamed: StreamedReply | None
    #: "typing…" and the "still working" note
    presence: Presence
    #: the text the agent is given (a voice note's transcript once it is heard)
    text: str
    #: a photo's or voice note's keys of the user message (``image``, ``voice``; media/intake.py), once prepared
    media: dict[str, Any] | None = None
    #: what goes before the answer to a photo or voice note (``heard: "…"``, a note), once it is prepared
    media_before: str = ""
    #: a photo or voice note made ready by an earlier try of this turn (before a database outage): not made again
    prepared: Prepared | None = None
    #: told of a photo or voice note made ready, so that a try after a database outage keeps it
    noted: Callable[[Prepared], None] = _noted

    @property
    def accepted(self) -> Accepted:
        return self.journalled.accepted


def answering(j: Journalled, parts: Parts, channel: BaseChannel | None, kind: str, streamed: StreamedReply | None,
              presence: Presence, prepared: Prepared | None = None,
              noted: Callable[[Prepared], None] = _noted) -> Answering:
    """The :class:`Answering` value a message's steps start from."""
    return Answering(j, parts, channel, kind, streamed, presence, j.accepted.text, prepared=prepared, noted=noted)


@dataclass(frozen=True, slots=True)
class Answer:
    """What a step answered: the log line's outcome, the reply (None or empty: none) and the tool calls."""

    outcome: str
    reply: str | None
    tool_calls: int = 0
    #: the reply the agent kept in the outbox with its answer (or a resumed message's kept reply)
    kept_reply: str | None = None

    @property
    def kept(self) -> bool:
        """The reply is in the outbox already: the outbox need not keep it again."""
        return self.reply is not None and self.reply == self.kept_reply


def answered(outcome: str, reply: str | None, tool_calls: int = 0) -> Answer:
    """An :class:`Answer`, for a step declared elsewhere (a test's, an embedding's)."""
    return Answer(outcome, reply, tool_calls)


def kept_answer(j: Journalled) -> Answer:
    """A resumed message whose reply was kept in the outbox before a crash: sent, not made again."""
    return Answer("kept reply", j.reply, kept_reply=j.reply)


def failed_answer(failure: Exception, reply: str) -> Answer:
    """A turn that failed for good: the one error path's sentence."""
    return Answer(f"error {type(failure).__name__}", reply)


Next = Callable[[Answering], Awaitable[Answer]]
#: ``step(answering, next)``: answer, or ``await next(answering)``
Step = Callable[[Answering, Next], Awaitable[Answer]]


async def reply_hooks(a: Answering, next: Next) -> Answer:  # noqa: A002 - the middleware's usual name
    """The answer, whichever step made it, after the ``after_reply`` hooks (an empty one is none)."""
    done = await next(a)
    if not done.reply:
        return done
    reply = await a.parts.hooks.after_reply(a.accepted.message, done.reply)
    return done if reply == done.reply else dataclasses.replace(done, reply=reply)


async def command(a: Answering, next: Next) -> Answer:  # noqa: A002 - the middleware's usual name
    """A command runs; its reply is the answer."""
    item = a.accepted
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
    item, caps = a.accepted, a.parts.caps
    if a.kind not in MEDIA_KINDS or caps is None or not caps.caps() or a.prepared is not None \
            or a.journalled.user_seq is not None:
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
    item = a.accepted
    if a.kind not in MEDIA_KINDS or a.journalled.user_seq is not None:
        return await next(a)  # not media, or its user message is stored: the turn reads that
    prepared = a.prepared
    if prepared is None:
        prepared = await a.parts.media.prepare(item.message, item.text, item.info.session_id, a.channel)
        a.noted(prepared)
    if prepared.reply is not None:
        return Answer(f"{a.kind}: a note", prepared.reply)
    text = model_text(item.message, prepared.text) if prepared.spoken else prepared.text
    return await next(dataclasses.replace(a, text=text, media=prepared.keys, media_before=prepared.before))


async def agent_turn(a: Answering, next: Next) -> Answer:  # noqa: A002
    """The agent's turn, the "still working" note armed; the answer (after the media's note, if any)."""
    p = a.parts
    a.presence.still_working()
    reply, tool_calls, outcome, kept = await run_agent(
        a.journalled, a.text, a.media, sessions=p.sessions, agent=p.agent, store=p.store, hooks=p.hooks,
        sink=a.streamed, gate=_capped(p.caps, p.admins) if p.caps is not None else None)
    if a.media_before and reply:
        reply = f"{a.media_before}\n\n{reply}"
    return Answer(outcome, reply, tool_calls, kept)


#: The steps, in order. The last one always answers.
STEPS: tuple[Step, ...] = (reply_hooks, command, text_only, cap_before_media, media_note, agent_turn)


async def answer(steps: Sequence[Step], answering: Answering) -> Answer:
    """Run ``answering`` through ``steps``, in order."""

    async def at(index: int, a: Answering) -> Answer:
        if index == len(steps):
            raise LookupError("no step answered the message")
        return await steps[index](a, lambda later: at(index + 1, later))

    return await at(0, answering)


def _capped(caps: UsageCaps | None, admins: Admins) -> CapGate:
    """Around a message's turn: the usage caps' decision (DESIGN §12; admins exempt), and the turn in flight."""

    @contextlib.asynccontextmanager
    async def gate(item: Accepted) -> AsyncIterator[Turn]:
        if caps is None or not caps.caps():
            yield Turn(ALLOWED)
            return
        msg = item.message
        async with caps.turn(speaker_of(msg.channel, msg.user_id), item.info,
                             is_admin=await admins.is_admin_now(msg)) as turn:
            yield turn

    return gate

