"""One queued message on its session's worker: its journal write awaited, its steps run, its answer delivered.

:meth:`MessagePath.run` is what the session queue calls for each ticket (dispatcher/queue.py): a duplicate is
dropped, a claimed channel's message is left to a claimed run of its session (dispatcher/claims.py), and any
other is answered by :meth:`MessagePath.answer`, which is also the ``answer`` callable claimed runs are given.
Answering runs the message's :data:`dispatcher.steps.STEPS` on one of the ``max_concurrent_turns`` slots with
"typing…" shown (``Presence``), tries the turn again while the database is away (dispatcher/db_retry.py), and
hands the answer to the outbox, which marks the message answered once its platform accepted the reply.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from channels.base import BaseChannel
from core.messages import IncomingMessage
from dispatcher.claims import SessionClaims, session_lock
from dispatcher.db_retry import CLAIM_LOST, DB_RETRIES, journal_write, wait_for_database
from dispatcher.intake import MEDIA_KINDS, Accepted
from dispatcher.journal import Journalled, JournalWriter
from dispatcher.outbox import Outbox
from dispatcher.queue import Poke, SessionQueue, Stage, Ticket
from dispatcher.replies import Presence, StreamedReply, error_reply, open_stream, with_prefix
from dispatcher.steps import Answer, Parts, Step, answer, answering, failed_answer, kept_answer
from media.intake import Prepared
from reminders.firing import REMINDER, note_reminder
from store.locks import Locks
from store.reminders import Reminders

if TYPE_CHECKING:
    from config.settings import Config

logger = logging.getLogger(__name__)


class PathHost(Parts, Protocol):
    """What the path reads of its dispatcher when a message runs (tests and the app may swap a part)."""

    config: Callable[[], Config]
    queue: SessionQueue
    claims: SessionClaims
    journal: JournalWriter
    outbox: Outbox
    locks: Locks
    reminders: Reminders
    steps: tuple[Step, ...]
    still_working_after: float
    db_retry_delay: float

    @property
    def channels(self) -> Mapping[str, BaseChannel]: ...

    def claimed(self, channel: str) -> bool: ...

    async def send(self, msg: IncomingMessage, text: str) -> None: ...


class MessagePath:
    """The worker's side of a message, for one dispatcher."""

    def __init__(self, host: PathHost) -> None:
        self.d = host

    async def run(self, session_id: str, work: Ticket | Poke) -> None:
        """The session queue's handler: one ticket (or a poke) of the session."""
        d = self.d
        if isinstance(work, Poke):
            await d.claims.run(session_id)
            return
        try:
            await self._run(session_id, work)
        finally:
            d.claims.done(work)

    async def _run(self, session_id: str, ticket: Ticket) -> None:
        d, msg = self.d, ticket.accepted.message
        if ticket.stage is not Stage.QUEUED:  # a claimed run of its session answered it already
            return
        try:
            j = await journal_write(ticket, lambda: d.journal.record(ticket.accepted), d.db_retry_delay)
        except Exception as exc:  # noqa: BLE001 - the database refused the message
            await self.handle_error(ticket.accepted, exc)
            return
        if j is None:
            logger.info("duplicate %s message %s ignored", msg.channel, msg.message_id)
            if d.claimed(msg.channel):  # a redelivery: its first taker may have died
                await d.claims.run(session_id)
            return
        if d.claimed(msg.channel):
            d.claims.received(ticket, j)  # (again, for a write tried again after a database outage)
            await d.claims.run(session_id)
            return
        if ticket.take():
            await self.answer(ticket)

    async def answer(self, ticket: Ticket) -> None:
        """Answer one message whose ticket this run has taken (:meth:`Ticket.take`), and deliver its answer."""
        d, item = self.d, ticket.accepted
        j = await ticket.recorded
        assert j is not None
        started = time.perf_counter()
        streamed: StreamedReply | None = None
        retries = 0
        done = kept_answer(j) if j.reply is not None else None  # a kept reply: sent, not made again
        prepared: list[Prepared] = []  # a photo or voice note made ready by a try, kept for the next one
        while done is None:
            try:
                started = time.perf_counter()
                done, streamed = await self._steps(j, prepared[-1] if prepared else None, prepared.append)
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - one error path for everything
                failure: Exception = exc
            retries, j = await self._recover(j, failure, retries)
            if retries == CLAIM_LOST:
                logger.warning("session %s: another process took the session over while the database was away; "
                               "leaving message %s to it", item.info.session_id, j.inbox_id)
                return
            if retries > DB_RETRIES:
                done = failed_answer(failure, error_reply(item.info.session_id, failure, d.config()))
        d.queue.turn_finished(ticket)  # it appends nothing more: the session's next message may be stored at intake
        # The message is done only once the platform accepted its reply (dispatcher/outbox.py). A streamed
        # reply's final edit carries the hooked, prefixed text; with nothing shown yet it is one send.
        reply, outcome = done.reply, done.outcome
        final = self._final_edit(streamed) if streamed is not None and reply else None
        reminder = item.message.content_type == REMINDER
        if reminder and reply:
            outcome = "reminder"
            await note_reminder(d.reminders, d.sessions, j.inbox_id, item.message, item.info.session_id, reply)
        await d.outbox.deliver(j.inbox_id, item.message, reply or "", kept=done.kept, send=final, serial=reminder)
        if streamed is not None and not reply:
            await streamed.finish("")
        logger.info("session %s: %s in %.0f ms, %d tool call(s)%s", item.info.session_id, outcome,
                    (time.perf_counter() - started) * 1000, done.tool_calls, " (resumed)" if j.resumed else "")

    async def _steps(self, j: Journalled, prepared: Prepared | None, noted: Callable[[Prepared], None],
                     ) -> tuple[Answer, StreamedReply | None]:
        """Run the message through the steps on a slot, "typing…" shown; return the answer and its stream."""
        d, msg = self.d, j.accepted.message
        streamed: StreamedReply | None = None
        try:
            async with d.queue.slot():
                channel = d.channels.get(msg.channel)
                kind = msg.content_type
                if kind in MEDIA_KINDS and (channel is None or not channel.fetches_media):
                    kind = "unfetched " + kind  # this channel cannot fetch it: the "text only" note
                if j.accepted.command is None and (kind == "text" or kind in MEDIA_KINDS):
                    streamed = open_stream(channel, d.config(), msg)
                async with Presence(channel, msg, streamed, d.send, d.still_working_after) as presence:
                    done = await answer(d.steps, answering(j, d, channel, kind, streamed, presence, prepared, noted))
        except BaseException:
            if streamed is not None:  # what was shown stays; the error reply goes as its own message
                await streamed.abort()
            raise
        return done, streamed

    def _final_edit(self, streamed: StreamedReply) -> Any:
        """How the outbox puts a streamed reply's final text out: the stream's last edit, with the prefix."""

        async def send(msg: IncomingMessage, text: str) -> None:
            await streamed.finish(with_prefix(self.d.config(), msg, text))

        return send

    async def _recover(self, j: Journalled, failure: Exception, retries: int) -> tuple[int, Journalled]:
        """After a failed turn: wait while the database is away (dispatcher/db_retry.py)."""
        d, sid = self.d, j.accepted.info.session_id
        claim_alive: Callable[[], Awaitable[bool]] | None = None
        if d.claimed(j.accepted.message.channel):
            async def claim_alive() -> bool:
                return await d.locks.ping() and d.locks.held(session_lock(sid))

        return await wait_for_database(j, failure, retries, delay=d.db_retry_delay, store=d.store,
                                       sessions=d.sessions, claim_alive=claim_alive)

    async def handle_error(self, item: Accepted, exc: BaseException) -> None:
        """The one error path: the log gets the traceback, the user a short clear sentence (sent until the
        platform accepts it)."""
        await self.d.outbox.send(item.message, error_reply(item.info.session_id, exc, self.d.config()))

