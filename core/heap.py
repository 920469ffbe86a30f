"""The process's heap: giving freed memory back to the system (glibc's allocator; a no-op elsewhere), and
the garbage collector's generations (:func:`freeze`).

A long-running bot keeps what its allocator holds at its peak: the token counter's and the embedding
model's loading buffers, a migration's imports, a burst of chats. Two glibc settings keep the resident set
near what is in use (``bench/memory_rss.py``):

* :func:`limit_arenas`: glibc gives each thread that allocates its own arena (up to 8 per core), and
  memory freed in one arena is not reused by another. The bot's threads (aiosqlite's connection threads,
  the embedding and tokenizer warm-ups, the default executor) need no allocator of their own: two arenas
  are enough. The ``MALLOC_ARENA_MAX`` environment variable, when set, wins.
* :func:`limit_arenas` also fixes glibc's mmap threshold at 256 KB. By default glibc raises it to the
  largest buffer freed so far, after which buffers of one to four megabytes (a photo's download, its
  decoded pixels, its base64 request; a long answer's JSON) come from the heap and their fragments stay
  resident: 20 photos arriving at once left the process 120 MB larger. A fixed threshold keeps such
  buffers mmapped, and each is given back when freed.
* :func:`trim`: ``malloc_trim(0)`` returns the free pages of every arena to the system; called once the
  start-up work and each one-off load is done, and by the daily cleanup.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os
import sys
from functools import lru_cache

logger = logging.getLogger(__name__)

#: ``M_ARENA_MAX`` of glibc's ``mallopt``.
_M_ARENA_MAX = -8
#: ``M_MMAP_THRESHOLD`` of glibc's ``mallopt``.
_M_MMAP_THRESHOLD = -3
#: The arenas the bot's allocator uses (the main one and one for every other thread).
ARENAS = 2
#: Buffers this large or larger are mmapped, and returned to the system when freed.
MMAP_THRESHOLD = 256 * 1024


@lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL | None:
    """glibc, or None on another C library or system (then both calls do nothing)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim  # noqa: B018 - musl has no malloc_trim: then this raises and nothing is done
        libc.mallopt  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's arenas and fix its mmap threshold (call before threads start); True when the arena cap is
    in force (the ``MALLOC_ARENA_MAX`` and ``MALLOC_MMAP_THRESHOLD_`` environment variables win)."""
    libc = _libc()
    if libc is None:
        return False
    if not os.environ.get("MALLOC_MMAP_THRESHOLD_"):
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    return bool(libc.mallopt(_M_ARENA_MAX, arenas))


def trim() -> None:
    """Give the allocator's free pages back to the system."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


#: Allocations of tracked objects between two young collections (CPython's default is 700).
GC_YOUNG_THRESHOLD = 10_000


def freeze() -> None:
    """Put every object allocated so far (modules, classes, the tokenizer) in the collector's permanent
    generation, and collect the young generation less often.

    A full collection traverses every tracked object, and while it runs every chat waits; what start-up
    built lives as long as the process anyway, so it need not be traversed again (bench/cleanup.py
    measures the pauses). A turn allocates thousands of short-lived objects (the SDKs' request and
    response models, SQLAlchemy's rows), so CPython's default of a young collection every 700
    allocations ran several collections a turn, each walking the objects still alive; with 10,000 far
    fewer run (bench/concurrency.py; the figures are in BENCHMARKS.md). Cyclic garbage waits a little
    longer to be freed; the older generations' ratios stay CPython's.
    """
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)
    trim()
