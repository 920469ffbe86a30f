"""Intake: whether the bot acts on a message, what text it acts on, dedup, and the journal entry.

Everything here runs before a message is queued. :func:`evaluate` is synchronous so that messages are
queued in arrival order; the journal write (:func:`journal_payload` is what it stores) runs on its own.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.messages import IncomingMessage
from core.records import SessionInfo
from dispatcher.background import GroupBackground
from dispatcher.commands import CommandObject, parse_command, secret_free
from dispatcher.identity import session_for
from dispatcher.triggers import group_allowed, triggered_text

if TYPE_CHECKING:
    from config.settings import Config

logger = logging.getLogger(__name__)

#: How many channel message ids the in-memory dedup remembers (the journal catches older ones).
RECENT_IDS = 10_000
#: What a message may carry besides text that the bot acts on (DESIGN §5.1): the rest gets a short note.
MEDIA_KINDS: frozenset[str] = frozenset({"photo", "voice"})
#: A replied-to message is shown to the model up to this many characters.
REPLY_QUOTE_CHARS = 1000


@dataclass(frozen=True, slots=True)
class Accepted:
    """A message the bot acts on, in its session: the first of a message's stage values (received → journalled
    → accepted → answering → answered or skipped). Made by :func:`accept` and nowhere else
    (tests/dispatcher/test_stage_values.py); like the later ones, it is never changed, only followed.

    received: :class:`IncomingMessage`; journalled: :class:`dispatcher.journal.Journalled`; answering:
    :class:`dispatcher.steps.Answering`; answered: :class:`dispatcher.steps.Answer` (skipped: a plugin's
    ``before_agent`` held it, :class:`dispatcher.journal.Skipped`, or it was a duplicate).
    """

    message: IncomingMessage
    info: SessionInfo
    #: the text acted on (a command's text, or the message as the model sees it)
    text: str
    command: CommandObject | None
    #: the user message goes into the journal entry's transaction (the session was idle on arrival, so nothing
    #: can append to it before this turn starts); what happened is then the journal value's ``intake``
    store_user: bool = False


def take(msg: IncomingMessage, cfg: Config, channel: Any, recent: RecentIds, background: GroupBackground,
         store_user: Callable[[IncomingMessage, SessionInfo], bool]) -> Accepted | None:
    """Live intake's decision, synchronous so that messages queue in arrival order: the :class:`Accepted` value
    of a message the bot acts on, or None (ignored, kept as its group's background, or a duplicate delivery).
    ``store_user`` says whether its session is idle, so its user message goes in with its journal entry."""
    trigger = evaluate(msg, cfg, channel.bot_username if channel else "")
    if not trigger.act:
        if trigger.background is not None and not (msg.message_id and recent.seen(msg.channel, msg.message_id)):
            background.keep(msg, trigger.background)  # once per delivery (DESIGN §1.3)
        report_ignored(msg, trigger, channel)
        return None
    if not msg.message_id:
        msg = dataclasses.replace(msg, message_id=uuid.uuid4().hex)
    elif recent.seen(msg.channel, msg.message_id):
        logger.info("duplicate %s message %s ignored", msg.channel, msg.message_id)
        return None
    if msg.is_group and trigger.command is None and cfg.group_context_messages > 0:
        msg = background.mark(msg)  # the background shown with it ends here
    info = session_for(msg, cfg)
    return accept(msg, info, trigger.text, trigger.command, store_user=(
        trigger.command is None and msg.content_type == "text" and store_user(msg, info)))


def accept(msg: IncomingMessage, info: SessionInfo, text: str, command: CommandObject | None, *,
           store_user: bool = False) -> Accepted:
    """The :class:`Accepted` value of a message the bot acts on (live intake and crash resume alike)."""
    return Accepted(message=msg, info=info, text=text, command=command, store_user=store_user)


@dataclass(frozen=True, slots=True)
class Trigger:
    """What the bot makes of one message (DESIGN §1.3): act on it, keep it as group background, or neither."""

    act: bool
    #: the text to act on: a command's text, or the message as the model sees it (reply quote, ``[Speaker]``)
    text: str = ""
    command: CommandObject | None = None
    #: an untriggered text of a served group, kept as that group's background
    background: str | None = None
    #: why it is not acted on, in one clause (for the DEBUG log, and the terminal's hint)
    reason: str = ""


def _ignored(reason: str, background: str | None = None) -> Trigger:
    return Trigger(act=False, background=background, reason=reason)


def evaluate(msg: IncomingMessage, cfg: Config, bot_username: str, *, accepted: bool = False) -> Trigger:
    """The one evaluation of a message's triggers, for intake, the group background and crash resume.

    Commands addressed to another bot, untriggered group messages and non-text group messages are not acted
    on; a non-text private message is acted on with an empty text (it gets the "text only" note). A photo or
    voice note is acted on like a text whose text is its caption (DESIGN §5.1; :func:`_media_trigger`). With
    ``accepted`` (a journalled message being resumed), the message was taken when it arrived: it is acted on
    even if the trigger settings changed since, and only its text is worked out again.
    """
    if not accepted:
        if msg.is_from_bot:
            return _ignored("it comes from a bot")
        if msg.is_group and not group_allowed(msg, cfg.group_name_white_list):
            return _ignored("its group is not in group_name_white_list")
    # a document's caption may be a command (``/kb add``, DESIGN §1.4)
    command = parse_command(msg.text) if msg.content_type in ("text", "document") else None
    if command is not None:
        if not accepted and command.mention and bot_username and command.mention.lower() != bot_username.lower():
            return _ignored(f"the command is addressed to @{command.mention}, not to this bot")
        return Trigger(act=True, text=msg.text.strip(), command=command)
    if msg.content_type in MEDIA_KINDS and not accepted:
        return _media_trigger(msg, cfg, bot_username)
    if msg.content_type != "text" and not accepted:
        return _ignored("a group message that is not text") if msg.is_group else Trigger(act=True)
    triggered = triggered_text(msg, cfg, bot_username)
    if triggered is None:
        if not accepted:
            return _ignored(_untriggered(msg, cfg), _background(msg, cfg))
        triggered = msg.text.strip()
    command = parse_command(triggered)  # e.g. "@bot /help" in a group
    if command is not None:
        return Trigger(act=True, text=triggered, command=command)
    if not triggered and not accepted:
        return _ignored("nothing follows the trigger")
    return Trigger(act=True, text=model_text(msg, triggered))


def _media_trigger(msg: IncomingMessage, cfg: Config, bot_username: str) -> Trigger:
    """A photo or voice note (DESIGN §5.1): acted on in a private chat; in a group when its caption triggers
    the bot or it replies to the bot. The text is its caption, as a text message's would be."""
    if not msg.is_group:
        return Trigger(act=True, text=model_text(msg, msg.text.strip()))
    triggered = triggered_text(msg, cfg, bot_username)
    if triggered is None:
        return _ignored(f"a group {msg.content_type} that does not trigger the bot (by its caption, or a reply)")
    return Trigger(act=True, text=model_text(msg, triggered))


def _untriggered(msg: IncomingMessage, cfg: Config) -> str:
    if msg.is_group:
        return "it does not trigger the bot (group_chat_prefix, an @mention, group_chat_keyword or a reply)"
    prefixes = json.dumps(cfg.single_chat_prefix, ensure_ascii=False)
    return (f"it does not start with one of single_chat_prefix {prefixes}: start it with one, or set "
            'single_chat_prefix to [""] to answer every message')


def _background(msg: IncomingMessage, cfg: Config) -> str | None:
    """An untriggered text message of a served group, kept while ``group_context_messages`` is on."""
    text = msg.text.strip()
    if not msg.is_group or cfg.group_context_messages <= 0 or not text:
        return None
    return text


def report_ignored(msg: IncomingMessage, trigger: Trigger, channel: Any) -> None:
    """Log at DEBUG why a message is ignored; a private one is also told to its channel (the terminal's hint)."""
    logger.debug("%s message %s in %s ignored: %s", msg.channel, msg.message_id, msg.chat_id, trigger.reason)
    if channel is not None and not msg.is_group:
        channel.ignored(msg, trigger.reason)


def model_text(msg: IncomingMessage, words: str) -> str:
    """What the user said as the model sees it: after the message it replies to (:func:`with_reply`), and in a
    group after the speaker's name (:func:`speaker_text`). For a typed message, a caption, or a voice note's
    transcript alike."""
    text = with_reply(msg, words)
    return speaker_text(msg, text) if msg.is_group else text


def speaker_text(msg: IncomingMessage, text: str) -> str:
    """A group message's text as the model sees it: ``[Name] text`` (DESIGN §1.3)."""
    return f"[{msg.user_name or msg.user_id}] {text}"


def with_reply(msg: IncomingMessage, text: str) -> str:
    """The text preceded by the message it replies to, when that is someone else's (not the bot's)."""
    if not msg.reply_to_text or msg.reply_to_bot:
        return text
    quoted = msg.reply_to_text.strip()
    if len(quoted) > REPLY_QUOTE_CHARS:
        quoted = quoted[:REPLY_QUOTE_CHARS] + "…"
    return f'(replying to {msg.reply_to_name or "someone"}: "{quoted}") {text}'


def journal_payload(msg: IncomingMessage, command: CommandObject | None) -> dict[str, Any]:
    """What the journal stores of a message: all of it, but only the name of a secret command."""
    payload = msg.to_json()
    kept = secret_free(command) if command is not None else None
    if kept is not None:
        payload["text"] = kept
    return payload


class RecentIds:
    """The last channel message ids seen, to answer a duplicate delivery once without a database read."""

    def __init__(self, size: int = RECENT_IDS) -> None:
        self.size = size
        self._ids: OrderedDict[tuple[str, str], None] = OrderedDict()

    def seen(self, channel: str, message_id: str) -> bool:
        """True if the id was seen before; otherwise remember it and return False."""
        key = (channel, message_id)
        if key in self._ids:
            return True
        self.add(channel, message_id)
        return False

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._ids

    def forget(self, channel: str, message_id: str) -> None:
        """Forget an id, so a redelivery is taken again (its journal write failed)."""
        self._ids.pop((channel, message_id), None)

    def add(self, channel: str, message_id: str) -> None:
        """Remember an id (e.g. of a resumed message)."""
        self._ids[(channel, message_id)] = None
        if len(self._ids) > self.size:
            self._ids.popitem(last=False)
