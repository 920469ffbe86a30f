"""Image files of a session: made small once, kept under ``<data_dir>/media/<session dir>/``, owner-only.

A photo is decoded with Pillow, turned upright (EXIF orientation), scaled down to at most about one megapixel
(:data:`MAX_PIXELS`) and saved as JPEG, so what the model is sent and what ``/export`` includes is a few hundred
kilobytes whatever the phone took. ``<session dir>`` is the memory folder's rule (DESIGN §1.6): the session id
with every character outside ``[A-Za-z0-9_.-]`` replaced by ``_``.

The files live as long as the messages that name them: ``/forget`` and the cleanup job delete them with the
session's rows; ``/context clear`` keeps both (the rows stay in the database, history_search finds their
``[image: …]`` text, and ``/export`` includes the files). Nothing here holds an image in memory past one call.
"""

from __future__ import annotations

import io
import logging
import math
import os
import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from core.files import atomic_write, session_dir_name

if TYPE_CHECKING:
    from store.store import Store

logger = logging.getLogger(__name__)

#: The folder under ``data_dir`` that holds every session's image files.
MEDIA_FOLDER = "media"
#: A photo is scaled down to at most this many pixels (about one megapixel), keeping its proportions.
MAX_PIXELS = 1_000_000
#: JPEG quality of the kept file.
JPEG_QUALITY = 85
#: A download larger than this is refused before decoding (Telegram's Bot API serves files up to 20 MB).
MAX_DOWNLOAD_BYTES = 20 * 1024 * 1024
#: Pillow refuses to decode images with more pixels than this (a decompression bomb).
MAX_DECODE_PIXELS = 80_000_000


_executor: ThreadPoolExecutor | None = None


def image_executor() -> ThreadPoolExecutor:
    """The one worker thread that decodes and encodes images: one at a time, so a burst of photos holds one
    photo's pixels at a time, in one malloc arena."""
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="images")
    return _executor


class ImageError(ValueError):
    """The bytes are not an image Pillow can read (or are far too large)."""


@dataclass(frozen=True, slots=True)
class SavedImage:
    """A kept image: its path relative to ``data_dir`` (what the stored message names), its size and tokens."""

    file: str
    width: int
    height: int
    bytes: int

    @property
    def tokens(self) -> int:
        """What the provider charges for it in the context (:func:`image_tokens`)."""
        return image_tokens(self.width, self.height)


def image_tokens(width: int, height: int) -> int:
    """Tokens of an image part at OpenAI's rate for ``detail: "auto"`` on a large image (= "high").

    The image is scaled to fit 2048 x 2048, then its short side to 768; each 512-pixel tile costs 170 tokens,
    plus 85. A one-megapixel 4:3 photo (1155 x 866 -> 1024 x 768) is 4 tiles: 765 tokens; a square one is
    765 too; a tall or wide one (577 x 1732) up to 8 tiles: 1,445. Other providers charge about the same
    (Anthropic: about w*h/750, 1,334 for one megapixel; the window's 10 % reserve covers such gaps).
    """
    if width <= 0 or height <= 0:
        return 765
    scale = min(1.0, 2048 / max(width, height))
    w, h = width * scale, height * scale
    scale = min(1.0, 768 / min(w, h))
    w, h = w * scale, h * scale
    tiles = math.ceil(w / 512) * math.ceil(h / 512)
    return 170 * tiles + 85


def media_root(data_dir: Path) -> Path:
    """``<data_dir>/media``."""
    return Path(data_dir) / MEDIA_FOLDER


def session_media_dir(data_dir: Path, session_id: str) -> Path:
    """The session's image folder; ``ValueError`` if the id would name anything outside the media folder."""
    name = session_dir_name(session_id)
    if name in ("", ".", ".."):
        raise ValueError(f"session id {session_id!r} cannot name a media folder")
    return media_root(data_dir) / name


def resize_to_jpeg(data: bytes) -> tuple[bytes, int, int]:
    """Decode an image, turn it upright, scale it to at most :data:`MAX_PIXELS` and encode it as JPEG."""
    from PIL import Image, ImageOps  # imported on first use: most processes never see a photo

    if len(data) > MAX_DOWNLOAD_BYTES:
        raise ImageError(f"the image is {len(data):,} bytes, more than {MAX_DOWNLOAD_BYTES:,}")
    Image.MAX_IMAGE_PIXELS = MAX_DECODE_PIXELS
    try:
        with Image.open(io.BytesIO(data)) as source:
            source.draft("RGB", (2048, 2048))  # JPEG: decode at a reduced scale when that is enough
            image = ImageOps.exif_transpose(source)
            image.load()
    except (OSError, ValueError, Image.DecompressionBombError, SyntaxError) as exc:
        raise ImageError(f"not an image that can be read ({type(exc).__name__}: {exc})") from exc
    if image.mode != "RGB":
        background = Image.new("RGB", image.size, "white")  # transparency becomes white, not black
        rgba = image.convert("RGBA")
        background.paste(rgba, mask=rgba.getchannel("A"))
        image = background
    width, height = image.size
    if width * height > MAX_PIXELS:
        scale = math.sqrt(MAX_PIXELS / (width * height))
        size = (max(1, int(width * scale)), max(1, int(height * scale)))
        image = image.resize(size, Image.Resampling.LANCZOS)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=JPEG_QUALITY, optimize=True)
    return out.getvalue(), image.size[0], image.size[1]


def save_image(data_dir: Path, session_id: str, data: bytes, stem: str = "") -> SavedImage:
    """Resize ``data`` (:func:`resize_to_jpeg`) and write it, owner-only, into the session's media folder.

    The file is written under a temporary name and renamed, so a crash never leaves half a JPEG that a
    stored message names. Blocking: run it in a worker thread.
    """
    jpeg, width, height = resize_to_jpeg(data)
    folder = session_media_dir(data_dir, session_id)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(media_root(data_dir), 0o700)
    os.chmod(folder, 0o700)
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in stem)[:40]
    name = f"{safe or 'image'}-{uuid.uuid4().hex[:8]}.jpg"
    path = folder / name
    atomic_write(path, jpeg, suffix=".part")
    relative = path.relative_to(Path(data_dir)).as_posix()
    return SavedImage(file=relative, width=width, height=height, bytes=len(jpeg))


def read_image(data_dir: Path, relative: str) -> bytes | None:
    """The bytes of a kept image named by a stored message, or None when it is gone (or names anything
    outside the media folder)."""
    root = media_root(data_dir).resolve()
    path = (Path(data_dir) / relative).resolve()
    if not path.is_relative_to(root):
        logger.warning("an image path outside the media folder was refused: %s", relative)
        return None
    try:
        return path.read_bytes()
    except OSError:
        return None


def session_media_files(data_dir: Path, session_id: str) -> list[Path]:
    """The session's image files, oldest first (for ``/export``)."""
    try:
        folder = session_media_dir(data_dir, session_id)
    except ValueError:
        return []
    if not folder.is_dir() or folder.is_symlink():
        return []
    files = [p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")]
    return sorted(files, key=lambda p: (p.stat().st_mtime, p.name))


def delete_session_media(data_dir: Path, session_id: str) -> int:
    """Delete the session's image folder; return how many image files it held."""
    try:
        folder = session_media_dir(data_dir, session_id)
    except ValueError:
        return 0
    return _delete_folder(folder)


def _delete_folder(folder: Path) -> int:
    if folder.is_symlink():
        folder.unlink()
        return 0
    if not folder.is_dir():
        return 0
    count = sum(1 for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    shutil.rmtree(folder, ignore_errors=True)
    return count


def sweep_orphans(data_dir: Path, live_dirs: set[str], folders: list[Path]) -> int:
    """Delete the media ``folders`` whose session is gone (their name is not in ``live_dirs``); return the
    number of image files deleted. ``folders`` is listed *before* ``live_dirs`` is read, so a folder made for a
    session created meanwhile is never taken for an orphan."""
    removed = 0
    for folder in folders:
        if folder.name not in live_dirs:
            removed += _delete_folder(folder)
    return removed


def media_folders(data_dir: Path) -> list[Path]:
    """Every session folder under ``<data_dir>/media``."""
    root = media_root(data_dir)
    if not root.is_dir():
        return []
    return [p for p in root.iterdir() if p.is_dir() or p.is_symlink()]


__all__ = [
    "ImageError", "MAX_PIXELS", "MEDIA_FOLDER", "SavedImage", "delete_session_media", "image_tokens",
    "media_folders", "media_root", "read_image", "resize_to_jpeg", "save_image", "session_media_dir",
    "session_media_files", "sweep_media", "sweep_orphans",
]


async def sweep_media(store: Store, data_dir: Path) -> int:
    """The cleanup job's part (store/retention.py): delete the image folders whose session is no longer stored;
    return the image files deleted. The folders are listed before the sessions are read (see
    :func:`sweep_orphans`)."""
    import asyncio

    from store.media import live_session_dirs

    folders = await asyncio.to_thread(media_folders, data_dir)
    if not folders:
        return 0
    live = await store.run(live_session_dirs)
    return await asyncio.to_thread(sweep_orphans, data_dir, live, folders)
