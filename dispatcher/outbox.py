"""The outbox: a message is answered only when its platform accepted the reply.

A reply is kept in the message's journal row (``inbox.reply``) before it is sent, and the row is marked
done only once the channel's ``send`` returned. A send that fails for a reason that passes (a 502, a
timeout, a flood limit the channel's own library did not wait out) is retried by this layer, and by no
other, with backoff (:data:`core.retry.DELIVERY`), honouring the platform's own delay, until it goes
through or the bot stops; the row then stays pending with its reply, and the next start sends that reply instead
of running the turn again (:mod:`dispatcher.resume`). A send the platform refuses for good (the user
blocked the bot, the chat is gone) is logged and the message marked done: retrying cannot help.

The one window left is a crash after the platform accepted a reply and before the row is marked done: the
reply is then sent once more after the restart. Platforms offer no idempotency key to close it. Replies to
people are one per message, so a crash repeats at most the ones in flight; reminders fall due by the dozen in
one minute, so their sends go one at a time (``serial``): each is marked before the next send starts, and a
crash repeats at most one reminder.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from channels.base import BaseChannel
from core.messages import IncomingMessage
from core.retry import DATABASE, DELIVERY, RetryPolicy
from store.engine import database_unavailable
from store.store import Store

if TYPE_CHECKING:
    from tenacity import RetryCallState

logger = logging.getLogger(__name__)


class Outbox:
    """Delivers final replies once, durably."""

    def __init__(self, store: Store, channels: Mapping[str, BaseChannel],
                 send: Callable[[IncomingMessage, str], Awaitable[None]], *, retry: RetryPolicy = DELIVERY) -> None:
        self.store = store
        self.channels = channels
        self._send = send
        #: how a send is retried: until it goes through (the policy's attempts are None)
        self.retry = retry
        #: held from a serial send's attempt until its row is marked done (released at once when it failed)
        self._serial = asyncio.Lock()

    async def deliver(self, inbox_id: int | None, msg: IncomingMessage, reply: str, *, kept: bool = False,
                      send: Callable[[IncomingMessage, str], Awaitable[None]] | None = None,
                      serial: bool = False) -> bool:
        """Keep ``reply`` for the message, send it until the platform accepts it, then mark the message done.

        ``kept``: the reply is stored already (a resumed one). ``send``: how to put the final text out
        instead of a new message (a streamed reply's final edit); after a restart a kept reply always goes
        out as a new message. ``serial`` (reminders): no other serial send starts between this one's attempt
        and its row marked done, so a crash can repeat at most one of them; a failed attempt lets the others
        go while it waits for its retry. Returns True when the platform accepted it. Cancelled (the bot stops),
        the message stays pending with its reply, for the next start.
        """
        if inbox_id is not None and reply and not kept:
            await self._keep(inbox_id, reply)
        if not serial or not reply:
            accepted = await self.send(msg, reply, send) if reply else True
            if inbox_id is not None:
                await self.mark_done(inbox_id)
            return accepted
        put = send or self._send
        held = False

        async def one_at_a_time(to: IncomingMessage, text: str) -> None:
            nonlocal held
            await self._serial.acquire()
            try:
                await put(to, text)
            except BaseException:
                self._serial.release()
                raise
            held = True  # accepted: the next serial send waits until this row is marked

        try:
            accepted = await self.send(msg, reply, one_at_a_time)
            if inbox_id is not None:
                await self.mark_done(inbox_id)
        finally:
            if held:
                self._serial.release()
        return accepted

    async def send(self, msg: IncomingMessage, text: str,
                   send: Callable[[IncomingMessage, str], Awaitable[None]] | None = None) -> bool:
        """Send until accepted (True) or refused for good (False); transient failures are retried.

        The channel says which failures pass and how long the platform asked to wait
        (:meth:`BaseChannel.retry_delay`); otherwise the policy's backoff decides the wait.
        """
        channel = self.channels.get(msg.channel)
        tries = 0

        async def once() -> None:
            nonlocal tries
            tries += 1
            await (send or self._send)(msg, text)

        def asked(exc: BaseException) -> float | None:
            return channel.retry_delay(exc, tries - 1) if channel is not None else None

        def log(state: RetryCallState) -> None:
            exc = state.outcome.exception()
            logger.warning("reply to %s:%s failed (%s: %s); try %d in %.1f s", msg.channel, msg.chat_id,
                           type(exc).__name__, exc, state.attempt_number + 1, state.upcoming_sleep)

        try:
            await self.retry.call(once, retry_on=lambda exc: asked(exc) is not None,
                                  hint=lambda exc: asked(exc) or None, before_sleep=log)
        except Exception as exc:  # noqa: BLE001 - the channel said retrying cannot help
            logger.error("reply to %s:%s refused for good (%s: %s); not retried", msg.channel, msg.chat_id,
                         type(exc).__name__, exc)
            return False
        if tries > 1:
            logger.info("reply to %s:%s delivered after %d retr%s", msg.channel, msg.chat_id, tries - 1,
                        "y" if tries == 2 else "ies")
        return True

    async def _keep(self, inbox_id: int, reply: str) -> None:
        try:
            await self.store.journal.keep_reply(inbox_id, reply)
        except Exception:  # noqa: BLE001 - the reply still goes out; only a crash before it would rerun the turn
            logger.exception("could not keep the reply of message %d", inbox_id)

    async def mark_done(self, inbox_id: int) -> None:
        """Mark a message answered, before the session's next turn can start.

        Not deferred to a later loop tick: a next turn can reach the model without yielding to the loop
        once (SQLite runs inline), and a crash then would answer this message a second time.
        """
        def waiting(state: RetryCallState) -> None:
            if state.attempt_number == 1:
                logger.warning("message %d was answered; marking it so waits for the database (%s)", inbox_id,
                               type(state.outcome.exception()).__name__ if state.outcome else "?")

        try:
            # The reply is out: while the database is away (a PostgreSQL restart), wait for it rather than
            # leave the message pending, which would send the same reply again once it is back.
            await DATABASE.call(self.store.journal.mark_done, inbox_id, retry_on=database_unavailable,
                                before_sleep=waiting)
        except Exception:  # noqa: BLE001 - it will be answered again after a restart, not lost
            logger.exception("could not mark message %d answered", inbox_id)
