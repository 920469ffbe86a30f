"""What a photo or a voice note becomes before its turn (DESIGN §5.1), on the session's worker.

- A **photo** is downloaded through its channel, made small (``media/files.py``) and kept with the session;
  the turn's user message names the file (``image``) and its text is the caption. Without vision (``vision``
  false, or a model the table says cannot see), a captioned photo is answered as text with a short note, and
  one without a caption gets the note alone.
- A **voice note** is downloaded and transcribed with ``speech_to_text_model`` at the endpoint's
  ``/audio/transcriptions``; the transcript is the user's message, stored as text with ``"voice": true``, and a
  short transcript is echoed before the answer (``heard: "…"``). Transcription off or failing: a short note.
  A channel whose platform transcribes voice itself (WeChat's ``voice_item.text``) hands that transcript over in
  ``extra["transcript"]``, and it is used as is; one whose audio no transcription model takes (WeChat's SILK,
  ``extra["audio_format"]``) and that came without a transcript gets a short note.

Nothing here is kept in memory past the call, and a failure is a short note to the user, never a lost turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from core.errors import EndpointNotFoundError, ModelNotFoundError, TransientLLMError
from core.llm import Transcriber
from core.messages import IncomingMessage
from core.usage import speaker_of, usage_scope
from media.files import ImageError, image_executor, save_image

if TYPE_CHECKING:
    from config.settings import Config
    from core.llm import BaseLLM

logger = logging.getLogger(__name__)

#: Photos downloaded and made small at once.
PHOTOS_AT_ONCE = 2
#: A transcript up to this many characters is echoed before the answer.
HEARD_MAX_CHARS = 200
NO_VISION_CAPTION_NOTE = "(This model cannot see images, so I answered the text of your message only.)"
NO_VISION_ALONE = ("This model cannot see images, so I cannot look at your photo. Tell me in words what you "
                   "would like to know.")
PHOTO_FAILED = "I could not open that photo ({why}). Please send it again, or tell me in words."
VOICE_OFF = "Voice messages are not transcribed here (speech_to_text_model is off). Please type your message."
VOICE_NO_ENDPOINT = "Voice messages cannot be transcribed: no model endpoint is configured. Please type your message."
VOICE_FAILED = "I could not transcribe that voice message ({why}). Please try again, or type it."
VOICE_EMPTY = "I could not make out any words in that voice message. Please try again, or type it."
VOICE_FORMAT = ("I could not transcribe that voice message: it came without a transcript, and its audio ({format}) "
                "is not a format transcription models take. Please type your message.")
#: audio formats ``/audio/transcriptions`` takes (OpenAI's list; Whisper servers take the same), by file suffix
TRANSCRIBABLE = frozenset({"flac", "m4a", "mp3", "mp4", "mpeg", "mpga", "oga", "ogg", "wav", "webm"})
NOT_SUPPORTED = "This chat cannot fetch photos or voice messages yet. Please type what you would like to say."


class Vision(Protocol):
    """Whether a model is sent images (``agent.images.Vision``: the ``vision`` setting, the table, refusals)."""

    def allows(self, model: str) -> bool: ...


@dataclass(slots=True)
class Prepared:
    """What a photo or voice note became: a reply without the agent (``reply``), or the turn's text and the
    stored message's extra keys, with what goes before the answer (``before``). A voice note's ``text`` is the
    user's own words (``spoken``): the dispatcher frames them as it frames a typed message (reply quote,
    ``[Speaker]`` in a group)."""

    reply: str | None = None
    text: str = ""
    keys: dict[str, Any] = field(default_factory=dict)
    before: str = ""
    spoken: bool = False


def heard_line(transcript: str) -> str:
    """``heard: "…"`` for a short transcript, "" for a long one (the user knows what they said)."""
    if len(transcript) > HEARD_MAX_CHARS:
        return ""
    return f'(heard: "{transcript}")'


class MediaIntake:
    """Turns a photo or voice note into the user message of its turn (see the module's docstring)."""

    def __init__(self, config: Callable[[], Config], llm: BaseLLM, vision: Vision) -> None:
        self.config = config
        self.llm = llm
        self.vision = vision
        #: photos fetched and decoded at once (each holds a few megabytes while it is)
        self._photos = asyncio.Semaphore(PHOTOS_AT_ONCE)

    async def prepare(self, msg: IncomingMessage, text: str, session_id: str, channel: Any) -> Prepared:
        """The photo or voice note ``msg`` (whose trigger text is ``text``) made ready for its turn."""
        if msg.content_type == "voice":
            with usage_scope(session_id, speaker_of(msg.channel, msg.user_id), "transcribe"):
                return await self._voice(msg, channel)
        return await self._photo(msg, text, session_id, channel)

    async def _download(self, msg: IncomingMessage, channel: Any) -> bytes | None:
        return await channel.download(msg) if channel is not None else None

    async def _photo(self, msg: IncomingMessage, text: str, session_id: str, channel: Any) -> Prepared:
        cfg = self.config()
        caption = msg.text.strip()
        if not self.vision.allows(cfg.model):
            if not caption:
                return Prepared(reply=NO_VISION_ALONE)
            return Prepared(text=text, before=NO_VISION_CAPTION_NOTE)
        try:
            async with self._photos:  # a burst of photos is fetched a few at a time: bounded memory
                data = await self._download(msg, channel)
                if data is None:
                    return Prepared(reply=NOT_SUPPORTED)
                saved = await asyncio.get_running_loop().run_in_executor(
                    image_executor(), save_image, cfg.data_path(), session_id, data, "photo")
                del data
        except ImageError as exc:
            logger.warning("session %s: photo %s could not be read: %s", session_id, msg.message_id, exc)
            return Prepared(reply=PHOTO_FAILED.format(why="it is not an image I can read"))
        except Exception as exc:  # noqa: BLE001 - a platform or disk error is a short note, not a lost turn
            logger.warning("session %s: photo %s could not be fetched: %s: %s", session_id, msg.message_id,
                           type(exc).__name__, exc)
            return Prepared(reply=PHOTO_FAILED.format(why="the download failed"))
        image = {"file": saved.file, "width": saved.width, "height": saved.height, "tokens": saved.tokens,
                 "caption": bool(caption)}
        logger.info("session %s: photo kept as %s (%dx%d, %d bytes)", session_id, saved.file, saved.width,
                    saved.height, saved.bytes)
        return Prepared(text=text, keys={"image": image})

    async def _voice(self, msg: IncomingMessage, channel: Any) -> Prepared:
        platform_transcript = str(msg.extra.get("transcript") or "").strip()
        if platform_transcript:  # the platform transcribed it already (WeChat does): no download, no model call
            return self._heard(msg, platform_transcript)
        cfg = self.config()
        model = cfg.speech_to_text_model
        if not model:
            return Prepared(reply=VOICE_OFF)
        audio = str(msg.extra.get("audio_format") or "ogg")
        if audio not in TRANSCRIBABLE:
            return Prepared(reply=VOICE_FORMAT.format(format=audio.upper()))
        if not isinstance(self.llm, Transcriber):  # no key and no endpoint (agent/llm.py UnconfiguredLLM)
            return Prepared(reply=VOICE_NO_ENDPOINT)
        try:
            data = await self._download(msg, channel)
            if data is None:
                return Prepared(reply=NOT_SUPPORTED)
            transcript = await self.llm.transcribe(data, filename=f"voice.{audio}", model=model)
        except Exception as exc:  # noqa: BLE001 - any failure is a short note; the log has the reason
            logger.warning("voice message %s could not be transcribed with %s: %s: %s", msg.message_id, model,
                           type(exc).__name__, exc)
            return Prepared(reply=VOICE_FAILED.format(why=_why(exc)))
        return self._heard(msg, transcript)

    @staticmethod
    def _heard(msg: IncomingMessage, transcript: str) -> Prepared:
        """The turn of a voice message whose words are ``transcript``."""
        transcript = " ".join(transcript.split())
        if not transcript:
            return Prepared(reply=VOICE_EMPTY)
        caption = msg.text.strip()
        spoken = f"{transcript}\n{caption}" if caption else transcript
        return Prepared(text=spoken, keys={"voice": True}, before=heard_line(transcript), spoken=True)


def _why(exc: BaseException) -> str:
    """A few words on why transcription failed, for the user."""
    if isinstance(exc, ModelNotFoundError):
        return "the endpoint does not know speech_to_text_model"
    if isinstance(exc, EndpointNotFoundError):
        return "the endpoint has no /audio/transcriptions"
    if isinstance(exc, TransientLLMError | TimeoutError):
        return "the transcription service did not answer"
    return "the transcription service refused it"


__all__ = ["HEARD_MAX_CHARS", "MediaIntake", "Prepared", "heard_line"]
