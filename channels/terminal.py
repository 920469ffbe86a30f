"""The terminal channel: each line the local user types is a message; the local user is an admin.

On a terminal it is a small chat window built on prompt_toolkit: line editing and history (arrow keys
move the cursor or recall a line, they never become text), a start banner, a "thinking…" line below
the prompt while a reply is on its way, replies and log lines printed above the prompt (never into
it), Ctrl-D to quit and Ctrl-C to stop as SIGINT does (a reply being written gets up to 10 s to finish; a
second Ctrl-C stops at once). prompt_toolkit rather than readline: readline's
prompt is redrawn by hand after every line printed from another task, which is the doubled-prompt
bug, while prompt_toolkit's ``patch_stdout`` does it for every write, logs included, and runs on the
event loop instead of a blocking thread.

With ``stream_replies`` a reply shows as the model writes it: its unfinished line where the
"thinking…" line was, each finished line printed above the prompt. Piped, it stays plain: no prompt,
no banner, no streaming (a script reading the output gets each whole reply once), one reply per line
on stdout. At EOF it waits for pending replies, then the app exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from channels.base import BaseChannel
from channels.registry import register_channel
from core.messages import IncomingMessage, ReplyStream

if TYPE_CHECKING:
    from prompt_toolkit import PromptSession

    from config.settings import Config

logger = logging.getLogger(__name__)

PROMPT = "you> "
REPLY_PREFIX = "bot> "
THINKING = "thinking…"
STOPPING = "stopping…"
#: Starts the hint shown for a line the bot does not act on.
HINT_PREFIX = "not answered: "
#: How long "thinking…" shows without news from the dispatcher (it calls :meth:`typing` every 4 s
#: while a turn runs), so a message that gets no reply at all does not leave it up for good.
THINKING_SECONDS = 6.0


#: The terminal's line history between runs, under data_dir (DESIGN §1.6).
HISTORY_FILE = "terminal_history"


#: The banner's last line in the terminal channel.
TERMINAL_HINT = "Type a message and press Enter. /help lists the commands; Ctrl-D quits."


def start_banner(cfg: Config, window: str = "", hint: str = TERMINAL_HINT) -> str:
    """The lines shown when the terminal starts: model, endpoint, its window (and where it came from), data
    folder, and what to do (``hint``: how to get help or quit, or a channel's own, e.g. WeChat's login)."""
    return "\n".join([
        f"longchat: model {cfg.model} at {cfg.open_ai_api_base}",
        *([f"context window: {window}"] if window else []),
        f"data folder: {cfg.data_path()}",
        hint,
    ])


def stdin_is_terminal() -> bool:
    """True when both ends are a terminal, so the interactive window can run."""
    try:
        return sys.stdin.isatty() and sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def _no_command(line: str) -> bool:
    """Keep a line unless it is a command (which might carry a secret), when the commands' rule is not known."""
    return not line.lstrip().startswith("/")
def screen_is_ours(cfg: Config) -> bool:
    """True when this process runs on a terminal its channels draw on (the chat window, a login QR code): log
    lines below WARNING then stay in bot.log, off the screen."""
    from channels.registry import channel_factory

    if not stdin_is_terminal():
        return False
    for name in cfg.channels:
        try:
            factory = channel_factory(name)
        except Exception:  # noqa: BLE001 - a channel that cannot load says so elsewhere
            continue
        if isinstance(factory, type) and issubclass(factory, BaseChannel) and factory.owns_terminal(cfg):
            return True
    return False


@register_channel("terminal")
class TerminalChannel(BaseChannel):
    """Reads the local user's lines and writes replies: a chat window on a terminal, plain lines when piped."""

    name = "terminal"
    operator_only = True

    @classmethod
    def owns_terminal(cls, cfg: Config) -> bool:
        """The chat window is the terminal."""
        return True

    def __init__(self, stdin=None, stdout=None, interactive: bool | None = None,
                 config: Config | None = None, window: Callable[[str], str] | None = None,
                 keep_line: Callable[[str], bool] | None = None) -> None:
        super().__init__()
        self._stdin = stdin or sys.stdin
        self._stdout = stdout or sys.stdout
        self._interactive = stdin_is_terminal() if interactive is None else interactive
        self.config = config
        #: ``window(model)``: the model's context window described, for the banner
        self.window = window
        #: shown on a terminal, never when piped; made at start, when the model's window is known
        self.banner = ""
        #: where line history is kept between runs (None: for this run only)
        self.history_path: Path | None = config.data_path() / HISTORY_FILE if config is not None else None
        #: False for a line that must not be kept (a secret the bot refuses), DESIGN §1.6: the commands' rule
        #: (``dispatcher.commands.keeps_no_secret``), handed over at construction; without it no command is kept
        self.keep_in_history: Callable[[str], bool] = keep_line or _no_command
        self._kept: Any = None
        self._task: asyncio.Task | None = None
        self._eof = asyncio.Event()
        self._thinking_until = 0.0
        self._live_line = ""
        #: the prompt_toolkit session while the interactive loop runs
        self._session: PromptSession | None = None

    @property
    def finite(self) -> bool:
        """The terminal ends at EOF (Ctrl-D)."""
        return True

    async def start(self, intake: bool = True) -> None:
        """Start reading lines in the background."""
        if self.config is not None and not self.banner:
            window = self.window(self.config.model) if self.window is not None else ""
            self.banner = start_banner(self.config, window=window)
        loop = self._interactive_loop() if self._interactive else self._piped_loop()
        self._task = asyncio.create_task(loop, name="terminal-reader")

    async def wait_closed(self) -> None:
        """Wait for EOF on stdin."""
        await self._eof.wait()

    async def stop(self) -> None:
        """Stop reading (a blocked piped readline ends with the process)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        self._eof.set()

    async def typing(self, to: IncomingMessage) -> None:
        """Show "thinking…" under the prompt while a reply is prepared."""
        self._think(True)

    async def send(self, to: IncomingMessage, text: str) -> None:
        """Print a reply (above the prompt on a terminal)."""
        if self._interactive:
            self._think(False)
            # patch_stdout's proxy: the text lands above the prompt, which is drawn again once
            sys.stdout.write(f"{REPLY_PREFIX}{text}\n")
            sys.stdout.flush()
        else:
            self._write(text)

    def ignored(self, message: IncomingMessage, reason: str) -> None:
        """A line the bot does not act on gets a one-line hint, instead of "thinking…" and then nothing."""
        hint = f"{HINT_PREFIX}{reason}"
        if self._interactive:
            self._think(False)
            sys.stdout.write(hint + "\n")  # above the prompt
            sys.stdout.flush()
        else:
            print(hint, file=sys.stderr, flush=True)  # stdout is for replies only: a script reads them

    def open_stream(self, to: IncomingMessage) -> ReplyStream | None:
        """On a terminal, a reply printed as it comes; piped, whole replies only."""
        return _TerminalStream(self, to) if self._interactive else None

    # --- piped: plain lines ---------------------------------------------------------------------------
    def _reader(self, loop: asyncio.AbstractEventLoop, lines: asyncio.Queue) -> None:
        """Blocking reads in a daemon thread, so a pending readline never holds up shutdown."""
        try:
            for line in iter(self._stdin.readline, ""):
                loop.call_soon_threadsafe(lines.put_nowait, line)
        except (OSError, ValueError, RuntimeError):  # closed stdin or closed loop
            pass
        finally:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(lines.put_nowait, "")

    async def _piped_loop(self) -> None:
        loop = asyncio.get_running_loop()
        lines: asyncio.Queue[str] = asyncio.Queue()
        threading.Thread(target=self._reader, args=(loop, lines), name="terminal-stdin", daemon=True).start()
        try:
            while True:
                line = await lines.get()
                if not line:
                    break
                await self._submit(line.rstrip("\r\n"))
        except Exception:  # noqa: BLE001 - a broken stdin ends the channel, not the app
            logger.exception("terminal input failed")
        finally:
            self._eof.set()

    async def _submit(self, text: str) -> None:
        if not text.strip():
            return
        await self.deliver(IncomingMessage(channel=self.name, chat_id="local", user_id="local",
                                           user_name="you", text=text))

    def _write(self, text: str, newline: bool = True) -> None:
        self._stdout.write(text + ("\n" if newline else ""))
        self._stdout.flush()

    # --- interactive: a prompt_toolkit window ----------------------------------------------------------
    def _history(self) -> Any:
        from channels.terminal_history import open_history

        self._kept = open_history(self.history_path, self.keep_in_history)
        return self._kept

    async def forget_chat(self, chat_id: str) -> None:
        """/forget of the terminal's conversation: the line history goes too, file and recall."""
        if self._kept is not None:
            self._kept.clear()
            buffer = self._session.default_buffer if self._session is not None else None
            if buffer is not None:
                buffer.reset(document=buffer.document)  # what is typed stays; the arrows recall nothing older
        elif self.history_path is not None and self.history_path.exists():
            self.history_path.write_bytes(b"")

    def _toolbar(self) -> str:
        if self._live_line:
            return self._live_line[-(self._width() - 1):]
        return THINKING if time.monotonic() < self._thinking_until else ""

    def _width(self) -> int:
        app = self._session.app if self._session is not None else None
        try:
            return max(20, app.output.get_size().columns) if app is not None else 80
        except Exception:  # noqa: BLE001 - no size known: a usual terminal's
            return 80

    def _live(self, line: str) -> None:
        """Show the streamed reply's unfinished line where "thinking…" is (empty: none)."""
        self._live_line = line
        if line:
            self._thinking_until = 0.0
        app = self._session.app if self._session is not None else None
        if app is not None:
            app.invalidate()

    def _think(self, on: bool) -> None:
        self._thinking_until = time.monotonic() + THINKING_SECONDS if on else 0.0
        app = self._session.app if self._session is not None else None
        if app is not None:
            app.invalidate()

    async def _interactive_loop(self) -> None:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.patch_stdout import patch_stdout
        from prompt_toolkit.styles import Style

        style = Style.from_dict({"bottom-toolbar": "noreverse italic"})
        self._session = session = PromptSession(history=self._history(), bottom_toolbar=self._toolbar,
                                                refresh_interval=0.5, style=style)
        try:
            with patch_stdout(raw=True):
                if self.banner:
                    print(self.banner, flush=True)
                while True:
                    try:
                        # the app's own SIGINT handler stays in place: prompt_toolkit would remove it afterwards
                        text = await session.prompt_async(PROMPT, handle_sigint=False)
                    except EOFError:  # Ctrl-D
                        break
                    except KeyboardInterrupt:  # Ctrl-C: the terminal is in raw mode, so it is a key here
                        print(STOPPING, flush=True)
                        # the app's SIGINT handler owns the graceful stop, as for a Ctrl-C from outside
                        os.kill(os.getpid(), signal.SIGINT)
                        break
                    if text.strip():
                        self._think(True)
                    await self._submit(text)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - a broken terminal ends the channel, not the app
            logger.exception("terminal input failed")
        finally:
            self._eof.set()


class _TerminalStream(ReplyStream):
    """A reply shown as it comes: its unfinished line where "thinking…" was, each finished line printed
    above the prompt. Whole lines only go through ``patch_stdout``, which redraws the prompt after each
    write, so a reply's lines stay whole on screen."""

    def __init__(self, channel: TerminalChannel, to: IncomingMessage) -> None:
        self.channel = channel
        self.to = to
        self.printed = 0  # characters of ``text`` already printed above the prompt
        self.text = ""

    def _print(self, upto: int) -> None:
        lead = REPLY_PREFIX if self.printed == 0 else ""
        sys.stdout.write(lead + self.text[self.printed:upto])
        sys.stdout.flush()
        self.printed = upto

    async def push(self, text: str) -> None:
        """Print the finished lines of ``text``; show its last, unfinished line live."""
        self.text = text
        end = text.rfind("\n") + 1
        if end > self.printed:
            self._print(end)
        self.channel._live(REPLY_PREFIX * (self.printed == 0) + text[self.printed:])

    async def discard(self) -> None:
        """What was shown was not the answer: print it as it stands, the answer starts afresh."""
        if self.text[self.printed:]:
            self.text += "\n"
            self._print(len(self.text))
        self.channel._live("")
        self.text, self.printed = "", 0

    async def finish(self, text: str) -> None:
        """Print the rest of the answer (all of it when nothing was printed yet)."""
        self.channel._live("")
        if self.printed == 0 or not text.startswith(self.text[:self.printed]):
            await self.channel.send(self.to, text)
        else:
            self.text = text + "\n"
            self._print(len(self.text))
        self.text, self.printed = "", 0
