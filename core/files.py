"""Files the bot writes: one atomic replace, owner-only, and the folder name of a session.

Every file the bot writes is for its owner's eyes only (``app.py`` sets the umask too), and a crash while one
is replaced leaves the old file or the new one, never half of either. The five writers (config.json, the
notes files, the terminal's history, ``/export``'s zip, the photos) all go through :func:`replacing`.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def session_dir_name(session_id: str) -> str:
    """The folder name of a session (DESIGN §1.6), under the memory folder and the media folder alike: every
    character outside ``[A-Za-z0-9_.-]`` becomes ``_``."""
    return _UNSAFE.sub("_", session_id)


@contextlib.contextmanager
def replacing(path: Path, *, suffix: str = ".tmp", parents: bool = False) -> Iterator[Path]:
    """A new empty file beside ``path`` (owner-only: ``mkstemp`` makes it 0600) for the block to write; renamed
    over ``path`` when the block ends, deleted when it raises. With ``parents``, missing folders are made
    (owner-only). The block must flush and ``fsync`` what it wrote if a crash must not lose it."""
    path = Path(path)
    if parents:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write(path: Path, data: str | bytes, *, parents: bool = False, suffix: str = ".tmp") -> None:
    """Replace ``path`` with ``data`` (text as UTF-8, line ends as given) through :func:`replacing`, synced to
    disk before the rename."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with replacing(path, suffix=suffix, parents=parents) as tmp, open(tmp, "wb") as fh:
        fh.write(raw)
        fh.flush()
        os.fsync(fh.fileno())


__all__ = ["atomic_write", "replacing", "session_dir_name"]
