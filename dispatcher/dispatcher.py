"""The dispatcher: the façade that composes the package's parts into the path from a message to its reply.

Intake (here, with :mod:`dispatcher.intake`'s triggers and :mod:`dispatcher.identity`'s session) makes each
message an :class:`~dispatcher.intake.Accepted` value, starts its journal write (:mod:`dispatcher.journal`) and
queues its :class:`~dispatcher.queue.Ticket` on its session's worker, one turn at a time per session, sessions
in parallel up to ``max_concurrent_turns``. The worker's side is :mod:`dispatcher.answering` (the ordered
steps of :mod:`dispatcher.steps`, then the outbox); :mod:`dispatcher.resume` requeues what a crash left
unanswered (live intake is held until it has); with several processes on one PostgreSQL database (DESIGN
§10), claimed runs answer a session's journal in order (:mod:`dispatcher.claims`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from agent.loop import Agent
from agent.sessions import SessionManager
from channels.base import BaseChannel
from core.messages import IncomingMessage
from core.records import PendingIncoming, SessionInfo
from dispatcher.admins import Admins
from dispatcher.answering import MessagePath
from dispatcher.background import GroupBackground
from dispatcher.claims import SessionClaims
from dispatcher.commands import CommandRegistry
from dispatcher.db_retry import DB_RETRY_DELAY
from dispatcher.hooks import MessageHooks
from dispatcher.intake import RecentIds, take
from dispatcher.journal import Journalled, JournalWriter
from dispatcher.outbox import Outbox
from dispatcher.queue import SessionQueue, Ticket
from dispatcher.replies import STILL_WORKING_AFTER, with_prefix
from dispatcher.resume import HeldIntake, JournalReader, kept_reply_ticket, resume
from dispatcher.steps import STEPS, Step
from media.intake import MediaIntake
from store.locks import LocalLocks, Locks
from store.reminders import Reminders
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
        self.hooks = hooks or MessageHooks()
        #: photos and voice notes made ready for their turn (DESIGN §5.1)
        self.media = media or MediaIntake(config, agent.llm, agent.vision)
        self.channels: dict[str, BaseChannel] = {}
        self.admins = admins or Admins(store, config, shared=self.locks.shared)
        #: the daily usage caps, checked before each turn (None: no caps)
        self.caps = caps
        #: one message's path on its session's worker (dispatcher/answering.py)
        self.path = MessagePath(self)
        self.queue = SessionQueue(self.path.run, config().max_concurrent_turns)
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
        #: live messages journalled while crash resume has not queued the journal's unanswered ones yet
        self.held = HeldIntake()
        self.journal = JournalWriter(store, sessions, self.hooks)
        #: reminders sent here are noted in their session's history (reminders/firing.py)
        self.reminders = Reminders(store)
        self.claims = SessionClaims(
            locks=self.locks, sessions=sessions, queue=self.queue, answer=self.path.answer,
            stopping=lambda: self._stopping,
            journal=JournalReader(store, config, self.channels, self.claimed, self.recent, self.started_at,
                                  self.outbox.mark_done))

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

    def claimed(self, channel: str) -> bool:
        """True when the channel's messages are answered through claims (several processes, and a channel
        any of them can reply through)."""
        found = self.channels.get(channel)
        return self.shared and found is not None and found.answered_anywhere

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
            self.recent.forget(item.accepted.message.channel, item.accepted.message.message_id)
            return False
        return True

    def submit(self, msg: IncomingMessage) -> None:
        """Take one message from a channel and return at once; it is queued in arrival order."""
        # The journal write runs on its own; the session worker awaits it and reports a failure.
        self._accept(msg)

    def _accept(self, msg: IncomingMessage) -> Ticket | None:
        """Decide synchronously whether to act (dispatcher/intake.py), start the journal write and queue the
        message in arrival order; taken while stopping, it is journalled and answered after the restart."""
        accepted = take(msg, self.config(), self.channels.get(msg.channel), self.recent, self.background,
                        self._idle)
        if accepted is None:
            return None
        ticket = Ticket(accepted, self.journal.write(accepted, late=self._stopping, then=lambda j: self._journalled(
            ticket, j)))
        if not self._stopping and not self.held.keep(ticket):
            self.queue.enqueue(ticket)
        return ticket

    def _idle(self, msg: IncomingMessage, info: SessionInfo) -> bool:
        """No queued or running work for this session: nothing can append to it before this turn starts (while
        intake is held, resumed messages not yet queued may; with other processes, another one may be in
        this session's turn: the user message waits for its own)."""
        return not (self._stopping or self.shared or self.held.holding or self.queue.appending(info.session_id))

    async def intake_settled(self) -> None:
        """Wait until every message taken so far is journalled (or refused by the database).

        A channel awaits this before it confirms messages to its platform (Telegram's next getUpdates
        offset): confirmed but not yet journalled, a message would be lost by a crash.
        """
        await self.journal.settled()

    def _journalled(self, ticket: Ticket, j: Journalled) -> None:
        if self.claimed(j.accepted.message.channel):
            self.claims.received(ticket, j)

    # --- crash resume --------------------------------------------------------------------
    def hold_intake(self) -> None:
        """Until :meth:`resume_pending` has run, journal live messages but queue none of them (called before the
        channels start; dispatcher/resume.py :class:`~dispatcher.resume.HeldIntake` says why)."""
        self.held.hold()

    async def resume_pending(self) -> int:
        """Queue every message that was stored but never answered, then the held live ones behind them; with
        several processes, start claiming the sessions with unanswered messages."""
        count = await resume(self.store, self.config(), self.channels, self.claimed, self.recent, self.held,
                             self.queue.enqueue)
        if count:
            logger.info("resuming %d unanswered message(s)", count)
        if self.shared:
            claimed = await self.claims.sweep()
            self.claims.start()
            if claimed:
                logger.info("%d session(s) with unanswered messages to claim", claimed)
        return count

    async def answer_journalled(self, row: PendingIncoming) -> None:
        """Send a journal row whose reply was kept outside intake (a reminder that fell due) like a resumed one:
        on its session's worker, in order with its turns; with several processes, through a claimed run."""
        if self.claimed(IncomingMessage.from_json(row.payload).channel):
            self.queue.poke(row.session_id)
        elif ticket := await kept_reply_ticket(self.store, self.config(), self.channels, self.recent, row):
            self.queue.enqueue(ticket)

    # --- output --------------------------------------------------------------------------
    async def send(self, msg: IncomingMessage, text: str) -> None:
        """Reply to ``msg`` through its channel, with the configured reply prefix."""
        channel = self.channels.get(msg.channel)
        if channel is None:
            logger.error("no channel %s to reply through", msg.channel)
            return
        await channel.send(msg, with_prefix(self.config(), msg, text))

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
