"""The path from an incoming message to a reply, composed from the package's parts.

:mod:`dispatcher.intake` decides whether the bot acts (triggers, whitelist, dedup) and what the journal
stores; :mod:`dispatcher.identity` names the session (DESIGN §1.3). Each message is journalled in the
``inbox`` table before it is queued on its session's worker (:class:`dispatcher.queue.SessionQueue`), so one
session runs one turn at a time, in arrival order, while sessions run concurrently up to
``max_concurrent_turns``. :mod:`dispatcher.handlers` runs a command or the agent; :mod:`dispatcher.resume`
requeues what a crash left unanswered (live intake is held until it has); :mod:`dispatcher.replies` holds
the output side, and :mod:`dispatcher.outbox` delivers each final reply once, marking the message answered
only when its platform accepted it. A failed turn gets one short sentence (:func:`error_reply`); a turn that
failed because the database was away runs again once it is back.

With several processes on one PostgreSQL database (DESIGN §10), a session's worker does not answer its
item directly: it runs a claimed run (:mod:`dispatcher.claims`), which answers the session's unanswered
journal entries in order if no other process holds the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from agent.loop import Agent
from agent.session import SessionManager
from channels.base import BaseChannel
from core.messages import IncomingMessage
from core.records import PendingIncoming
from dispatcher.admins import Admins
from dispatcher.background import GroupBackground
from dispatcher.claims import SessionClaims, session_lock
from dispatcher.commands import CommandRegistry
from dispatcher.db_retry import CLAIM_LOST, DB_RETRIES, DB_RETRY_DELAY, journalled, wait_for_database
from dispatcher.hooks import MessageHooks
from dispatcher.identity import session_for
from dispatcher.intake import MEDIA_KINDS, RecentIds, Stage, WorkItem, evaluate, report_ignored
from dispatcher.journal import JournalWriter
from dispatcher.outbox import Outbox
from dispatcher.queue import Poke, SessionQueue
from dispatcher.replies import (
    STILL_WORKING_AFTER,
    Presence,
    StreamedReply,
    error_reply,
    open_stream,
    with_prefix,
)
from dispatcher.resume import pending_items, resumed_item
from dispatcher.steps import STEPS, Answering, Step, answer
from media.intake import MediaIntake
from reminders.firing import REMINDER, note_reminder
from store.locks import LocalLocks, Locks
from store.store import Store
from usage.caps import UsageCaps

if TYPE_CHECKING:
    from config.settings import Config
    from dispatcher.commands import Services

logger = logging.getLogger(__name__)

class Dispatcher:
    """Routes messages from every channel to commands or the agent, and replies."""

    def __init__(
        self,
        *,
        config: Callable[[], Config],
        store: Store,
        agent: Agent,
        sessions: SessionManager,
        commands: CommandRegistry | None = None,
        services: Services | None = None,
        locks: Locks | None = None,
        admins: Admins | None = None,
        hooks: MessageHooks | None = None,
        media: MediaIntake | None = None,
        caps: UsageCaps | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.agent = agent
        self.sessions = sessions
        self.commands = commands or CommandRegistry()
        self.services = services
        #: who answers a session when several processes share the database (store/locks.py)
        self.locks: Locks = locks or LocalLocks()
        self.claims = SessionClaims(self)
        self.hooks = hooks or MessageHooks()
        #: photos and voice notes made ready for their turn (DESIGN §5.1)
        self.media = media or MediaIntake(config, agent.llm, agent.vision)
        self.channels: dict[str, BaseChannel] = {}
        self.admins = admins or Admins(store, config, shared=self.locks.shared)
        #: the daily usage caps, checked before each turn (None: no caps)
        self.caps = caps
        self.queue = SessionQueue(self._process_queued, config().max_concurrent_turns)
        self.outbox = Outbox(store, self.channels, self.send)
        #: seconds before a turn without an answer gets the "still working" note
        self.still_working_after = STILL_WORKING_AFTER
        #: what a message goes through once its turn comes, in order (dispatcher/steps.py)
        self.steps: tuple[Step, ...] = STEPS
        self.db_retry_delay = DB_RETRY_DELAY
        self.recent = RecentIds()
        #: when this process started: a journalled message older than that is answered after a restart
        self.started_at = datetime.now(UTC)
        #: what groups say without asking the bot (DESIGN §1.3)
        self.background = GroupBackground(store)
        self._stopping = False
        #: while not None, live messages are journalled but wait here until crash resume has queued the
        #: journal's unanswered ones
        self._held: list[WorkItem] | None = None
        self.journal = JournalWriter(store, sessions, self.hooks, self._journalled_here)
        #: reminders sent here are noted in their session's history (reminders/firing.py)
        self.reminders = store.reminders

    # --- wiring --------------------------------------------------------------------------
    def add_channel(self, channel: BaseChannel) -> None:
        """Attach a channel: its messages come here, replies go back through it."""
        self.channels[channel.name] = channel
        if channel.operator_only:
            self.admins.operator_channels.add(channel.name)
        channel.set_handler(self.handle, submit=self.submit)
        channel.intake_settled = self.intake_settled

    @property
    def busy(self) -> bool:
        """True while any session has queued or running work."""
        return self.queue.busy()

    @property
    def shared(self) -> bool:
        """True when other processes may answer this database's sessions too (DESIGN §10)."""
        return self.locks.shared

    @property
    def stopping(self) -> bool:
        """True once :meth:`drain` began."""
        return self._stopping

    def claimed(self, channel: str) -> bool:
        """True when the channel's messages are answered through claims (several processes, and a channel
        any of them can reply through)."""
        found = self.channels.get(channel)
        return self.shared and found is not None and found.answered_anywhere

    def session_busy(self, session_id: str) -> bool:
        """True while the session has queued or running work here."""
        return self.queue.busy(session_id)

    def poke(self, session_id: str) -> None:
        """Queue a claimed run of the session (several processes): its unanswered messages get answered."""
        self.queue.poke(session_id)

    # --- intake --------------------------------------------------------------------------
    async def handle(self, msg: IncomingMessage) -> bool:
        """Take one message from a channel. Returns once it is journalled or ignored (True), or refused by the
        database (False: its worker keeps trying, and a redelivery of it is taken again, not ignored)."""
        item = self._accept(msg)
        if item is None:
            return True
        try:
            await asyncio.shield(item.recorded)
        except Exception:  # noqa: BLE001 - reported by the worker
            # A platform told to deliver it again (the webhook's 500) must not be answered "duplicate" until
            # a journal write succeeds; the journal's own dedup keeps it answered once.
            self.recent.forget(item.message.channel, item.message.message_id)
            return False
        return True

    def submit(self, msg: IncomingMessage) -> None:
        """Take one message from a channel and return at once; it is queued in arrival order."""
        # The journal write runs on its own; the session worker awaits it and reports a failure.
        self._accept(msg)

    def _accept(self, msg: IncomingMessage) -> WorkItem | None:
        """Decide synchronously whether to act, and queue the message in arrival order."""
        cfg = self.config()
        channel = self.channels.get(msg.channel)
        bot_username = channel.bot_username if channel else ""
        trigger = evaluate(msg, cfg, bot_username)
        if not trigger.act:
            if trigger.background is not None:
                self._keep_background(msg, trigger.background)
            report_ignored(msg, trigger, channel)
            return None
        text, command = trigger.text, trigger.command
        if msg.message_id:
            if self.recent.seen(msg.channel, msg.message_id):
                logger.info("duplicate %s message %s ignored", msg.channel, msg.message_id)
                return None
        else:
            msg = dataclasses.replace(msg, message_id=uuid.uuid4().hex)
        if msg.is_group and command is None and cfg.group_context_messages > 0:
            msg = self.background.mark(msg)  # the background shown with it ends here
        info = session_for(msg, cfg)
        item = WorkItem(message=msg, info=info, text=text, command=command)
        # No queued or running work for this session: nothing can append to it before this turn starts.
        # (While intake is held, resumed messages not yet queued may still append theirs.)
        # With other processes, another one may be in this session's turn: the user message waits for its own.
        item.store_with_intake = (command is None and msg.content_type == "text" and not self._stopping
                                  and not self.shared
                                  and self._held is None and not self.queue.appending(info.session_id))
        # Shutting down: journal it (the platform will not deliver it again) and answer after the restart.
        self.journal.write(item, late=self._stopping)
        if self._stopping:
            return item
        if self._held is not None:
            self._held.append(item)
            return item
        self.queue.enqueue(item)
        return item

    def _keep_background(self, msg: IncomingMessage, text: str) -> None:
        """Store an untriggered group message as its group's background (DESIGN §1.3), once per delivery."""
        if not (msg.message_id and self.recent.seen(msg.channel, msg.message_id)):
            self.background.keep(msg, text)

    async def intake_settled(self) -> None:
        """Wait until every message taken so far is journalled (or refused by the database).

        A channel awaits this before it confirms messages to its platform (Telegram's next getUpdates
        offset): confirmed but not yet journalled, a message would be lost by a crash.
        """
        await self.journal.settled()

    def _journalled_here(self, item: WorkItem) -> None:
        """A journalled item of a claimed channel is answered by this process's claimed run unless taken over."""
        if item.inbox_id is not None and self.claimed(item.message.channel):
            self.claims.local[item.inbox_id] = item

    # --- crash resume --------------------------------------------------------------------
    def hold_intake(self) -> None:
        """Until :meth:`resume_pending` has run, journal live messages but queue none of them.

        Called before the channels start. A platform redelivers what a killed process fetched but never
        confirmed: queued at once, such a message found its journal row (a duplicate, ignored) while resume
        skipped the row as "arrived live" (lost), and a session's new messages overtook its resumed ones
        (answered out of order). Held messages are journalled at once all the same: the platform counts
        them as delivered.
        """
        if self._held is None:
            self._held = []

    async def resume_pending(self) -> int:
        """Queue every message that was stored but never answered (crash, kill -9, shutdown mid-turn),
        then the held live messages, in arrival order, behind them."""
        # With several processes, the claimed channels' messages are answered by claimed runs of their
        # sessions instead (in journal order, so resumed and live messages cannot overtake each other).
        own = {name: c for name, c in self.channels.items() if not self.claimed(name)}
        count = 0
        try:
            live_ids = self._live_ids if self._held is not None else None
            if own:
                async for item in pending_items(self.store, self.config(), own, self.recent, live_ids,
                                                skip=set(self.channels) - set(own)):
                    self.queue.enqueue(item)
                    count += 1
        finally:
            held, self._held = self._held, None
            for item in held or ():
                self.queue.enqueue(item)  # one that a resumed item answers resolves as a journal duplicate
        if count:
            logger.info("resuming %d unanswered message(s)", count)
        if self.shared:
            claimed = await self.claims.sweep()
            self.claims.start()
            if claimed:
                logger.info("%d session(s) with unanswered messages to claim", claimed)
        return count

    async def _live_ids(self) -> set[int]:
        """Journal ids of the messages received live since start (their journal writes awaited)."""
        held = list(self._held or ())
        await asyncio.gather(*(item.recorded for item in held if item.recorded is not None),
                             return_exceptions=True)
        return {item.inbox_id for item in held if item.inbox_id is not None}

    async def answer_journalled(self, row: PendingIncoming) -> None:
        """Send a journal row whose reply was kept outside intake (a reminder that fell due) like a resumed one:
        on its session's worker, in order with its turns; with several processes, through a claimed run."""
        msg = IncomingMessage.from_json(row.payload)
        if self.claimed(msg.channel):
            self.poke(row.session_id)
            return
        channel = self.channels.get(msg.channel)
        if channel is None:  # it stays pending: sent at a start where its channel runs
            logger.warning("journal row %d: channel %s is not running here", row.id, msg.channel)
            return
        self.recent.add(msg.channel, msg.message_id)
        item = await resumed_item(self.store, self.config(), channel, row, msg)
        item.reply, item.resumed = row.reply, False
        self.queue.enqueue(item)

    # --- one work item, on its session's worker ------------------------------------------
    async def _process_queued(self, session_id: str, item: WorkItem | Poke) -> None:
        if isinstance(item, Poke):
            await self.claims.run(session_id)
            return
        try:
            if item.stage >= Stage.ANSWERING:  # a claimed run of its session answered it already
                return
            try:
                recorded = await self._journalled(item)
            except Exception as exc:  # noqa: BLE001 - the database refused the message
                await self.handle_error(item, exc)
                return
            if recorded is None:
                logger.info("duplicate %s message %s ignored", item.message.channel, item.message.message_id)
                if self.claimed(item.message.channel):  # a redelivery: its first taker may have died
                    await self.claims.run(session_id)
                return
            if self.claimed(item.message.channel):
                await self.claims.run(session_id)
                return
            await self._process(item)
        finally:
            self.queue.turn_finished(item)
            if item.inbox_id is not None:
                self.claims.local.pop(item.inbox_id, None)

    async def answer_claimed(self, item: WorkItem) -> None:
        """Answer one message of a claimed run (dispatcher/claims.py)."""
        try:
            await self._process(item)
        finally:
            self.queue.turn_finished(item)

    async def _journalled(self, item: WorkItem) -> tuple[int, int | None] | None:
        return await journalled(item, self.journal.record, self.db_retry_delay)

    async def _process(self, item: WorkItem) -> None:
        item.advance(Stage.ANSWERING)
        started = time.perf_counter()
        outcome, reply, tool_calls = "kept reply", item.reply, 0
        streamed: StreamedReply | None = None
        retries = 0
        # A resumed item with its reply in the outbox: sent, not made again.
        while item.reply is None:
            try:
                started = time.perf_counter()
                outcome, reply, tool_calls, streamed = await self._answer(item)
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - one error path for everything
                failure: Exception = exc
            retries = await self._recover(item, failure, retries)
            if retries == CLAIM_LOST:
                logger.warning("session %s: another process took the session over while the database was away; "
                               "leaving message %s to it", item.info.session_id, item.inbox_id)
                return
            if retries > DB_RETRIES:
                outcome = f"error {type(failure).__name__}"
                reply = error_reply(item.info.session_id, failure, self.config())
                break
        self.queue.turn_finished(item)
        # The message is done only once the platform accepted its reply (dispatcher/outbox.py). A streamed
        # reply's final edit carries the hooked, prefixed text; with nothing shown yet it is one send.
        final = self._final_edit(streamed) if streamed is not None and reply else None
        kept = item.reply is not None or (reply is not None and reply == item.kept_reply)
        reminder = item.message.content_type == REMINDER
        if reminder and item.inbox_id is not None and reply:
            outcome = "reminder"
            await note_reminder(self.reminders, self.sessions, item.inbox_id, item.message, item.info.session_id,
                                reply)
        await self.outbox.deliver(item.inbox_id, item.message, reply or "", kept=kept, send=final, serial=reminder)
        if streamed is not None and not reply:
            await streamed.finish("")
        logger.info("session %s: %s in %.0f ms, %d tool call(s)%s", item.info.session_id, outcome,
                    (time.perf_counter() - started) * 1000, tool_calls, " (resumed)" if item.resumed else "")

    def _final_edit(self, streamed: StreamedReply) -> Any:
        """How the outbox puts a streamed reply's final text out: the stream's last edit, with the prefix."""

        async def send(msg: IncomingMessage, text: str) -> None:
            await streamed.finish(with_prefix(self.config(), msg, text))

        return send

    async def _answer(self, item: WorkItem) -> tuple[str, str | None, int, StreamedReply | None]:
        """Run the item through :data:`dispatcher.steps.STEPS` on a slot; return (outcome, reply, tool calls,
        stream)."""
        streamed: StreamedReply | None = None
        async with contextlib.AsyncExitStack() as signs:  # "typing…" lasts until the reply hook has run
            try:
                async with self.queue.slot():
                    channel = self.channels.get(item.message.channel)
                    kind = item.message.content_type
                    if kind in MEDIA_KINDS and (channel is None or not channel.fetches_media):
                        kind = "unfetched " + kind  # this channel cannot fetch it: the "text only" note
                    if item.command is None and (kind == "text" or kind in MEDIA_KINDS):
                        streamed = open_stream(channel, self.config(), item.message)
                    presence = await signs.enter_async_context(
                        Presence(channel, item.message, streamed, self.send, self.still_working_after))
                    done = await answer(self.steps, Answering(item, self, channel, kind, streamed, presence))
                self.queue.turn_finished(item)
                reply = done.reply
                if reply:
                    reply = await self.hooks.after_reply(item.message, reply)
            except BaseException:
                if streamed is not None:  # what was shown stays; the error reply goes as its own message
                    await streamed.abort()
                raise
        return done.outcome, reply, done.tool_calls, streamed

    async def _recover(self, item: WorkItem, failure: Exception, retries: int) -> int:
        """After a failed turn: wait while the database is away (dispatcher/db_retry.py)."""
        claim_alive = None
        if self.claimed(item.message.channel):
            async def claim_alive() -> bool:
                return await self.locks.ping() and self.locks.held(session_lock(item.info.session_id))

        return await wait_for_database(item, failure, retries, delay=self.db_retry_delay, store=self.store,
                                       sessions=self.sessions, claim_alive=claim_alive)

    # --- output --------------------------------------------------------------------------
    async def send(self, msg: IncomingMessage, text: str) -> None:
        """Reply to ``msg`` through its channel, with the configured reply prefix."""
        channel = self.channels.get(msg.channel)
        if channel is None:
            logger.error("no channel %s to reply through", msg.channel)
            return
        await channel.send(msg, with_prefix(self.config(), msg, text))

    async def handle_error(self, item: WorkItem, exc: BaseException) -> None:
        """The one error path: the log gets the traceback, the user a short clear sentence (sent until the
        platform accepts it)."""
        reply = error_reply(item.info.session_id, exc, self.config())
        await self.outbox.send(item.message, reply)

    # --- shutdown ------------------------------------------------------------------------
    async def drain(self, grace: float) -> bool:
        """Stop taking messages and wait up to ``grace`` s for queued turns. True if all finished."""
        self._stopping = True
        await self.claims.stop()
        unfinished = await self.queue.drain(grace)
        await self.flush_intake()
        if unfinished:
            logger.warning("%d session(s) still busy at shutdown; their messages resume at next start",
                           len(unfinished))
        return not unfinished

    async def cut_turns(self) -> None:
        """Stop now (a second Ctrl-C during :meth:`drain`): cancel the turns still running, as a grace that ran out
        does; their messages stay journalled and are answered after the next start."""
        if unfinished := await self.queue.drain(0):
            logger.warning("%d session(s) cut short at shutdown; their messages resume at next start", len(unfinished))

    async def flush_intake(self) -> None:
        """Wait until messages received during shutdown are journalled."""
        await self.background.flush()
        await self.journal.flush_late()

    async def wait_idle(self) -> None:
        """Wait until no session has queued or running work."""
        await self.queue.wait_idle()
