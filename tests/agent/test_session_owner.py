"""A session has one owner: agent/session.py (the handle) and agent/sessions.py (the manager) write its context,
in the store and in memory, together.

The session manager hands out :class:`SessionState`, whose async methods write the store and the live context
in one place (and :class:`LiveSessions`, the summariser's port, does the same for summaries; the manager's own
``clear``, ``compact``, ``note`` and ``erase`` use the state's live-only writers too). This walks the project's
source, those two modules aside, for the three ways around that:

- an assignment to, deletion of or in-place change of an attribute named like one of the state's fields on
  anything but ``self`` (tests included);
- a call of one of the state's live-only writers (its ``_``-methods: they change memory without the store)
  on anything but ``self`` (tests included);
- a use of one of the store's session writers (append*, set_summary, set_context_start, ...) outside ``store/``
  and the owner (tests, which prepare a database as an earlier process left it, aside).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import store.media
from agent.session import SessionState
from store.reminders import Reminders
from store.sessions import Sessions

ROOT = Path(__file__).resolve().parents[2]
#: the owner: the handle and the manager, exactly these two modules (relative to the project's root)
OWNERS = frozenset({"agent/session.py", "agent/sessions.py"})
#: the context's fields (``store``, where it is written, is set once by the manager and shares its name with
#: every other holder of a store)
FIELDS = frozenset(f.name for f in dataclasses.fields(SessionState)) - {"store"}
#: list and dict methods that change the object they are called on
MUTATORS = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "update",
                      "setdefault", "popitem", "__setitem__", "__delitem__"})
#: the state's writers that change memory only: called by the owner alone
LIVE_WRITERS = frozenset(name for name, _ in inspect.getmembers(SessionState, inspect.isfunction)
                         if name.startswith("_") and not name.startswith("__"))
#: the store's writers of a session's context (its messages, boundary and summary)
STORE_WRITERS = frozenset({"append_user", "append_answer", "set_summary", "set_context_start",
                           "set_summarized_through", "note_in_history", "rewrite_message"})
#: ``append`` is a list's too: a store's when called on something named ``...store`` or ``...store.sessions``
STORE_APPEND = "append"


#: writes of other classes' fields that share a name with one of the state's: (file, the written expression)
OTHER_CLASSES = {
    ("agent/context.py", "turn.messages"),  # a Turn (core/turns.py), a copy being prepared
    ("agent/provider_errors.py", "facts.messages"),  # ErrorFacts, what an error body says
    ("console/data.py", "turns[-1].messages"),  # a ShownTurn, a turn of a transcript page
}


def _not_self(node: ast.AST) -> bool:
    return not (isinstance(node, ast.Name) and node.id in ("self", "cls"))


def _field(node: ast.AST) -> str | None:
    """The field name when ``node`` is ``<not self>.<field>`` (or a subscript or slice of one)."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute) and node.attr in FIELDS and _not_self(node.value):
        return node.attr
    return None


def writes(source: str) -> list[tuple[int, str, str]]:
    """(line, field, written expression) for each write of a state field in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in MUTATORS):
            targets = [node.func.value]
        for target in targets:
            for part in target.elts if isinstance(target, ast.Tuple | ast.List) else [target]:
                name = _field(part)
                if name is not None:
                    while isinstance(part, ast.Subscript):
                        part = part.value
                    found.append((node.lineno, name, ast.unparse(part)))
    return found


def live_writer_calls(source: str) -> list[tuple[int, str]]:
    """(line, expression) for each use of a state's live-only writer on anything but ``self``."""
    return [(node.lineno, ast.unparse(node)) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Attribute) and node.attr in LIVE_WRITERS and _not_self(node.value)]


def store_writer_uses(source: str) -> list[tuple[int, str]]:
    """(line, expression) for each use of one of the store's session writers: a method (``x.set_summary``, a
    store's ``append``) or a function (``rewrite_message``, as ``store.run``'s argument)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and (
                node.attr in STORE_WRITERS
                or node.attr == STORE_APPEND and ast.unparse(node.value).lower().endswith(("store", "store.sessions"))):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Name) and node.id in STORE_WRITERS:
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.ImportFrom) and any(a.name in STORE_WRITERS for a in node.names):
            found.append((node.lineno, f"import of {', '.join(a.name for a in node.names)}"))
    return found


def _sources(*, tests: bool = True, root: Path = ROOT):
    """(path, source) of each module but the owner's two; without ``tests``, tests and benchmarks (which prepare a
    database as an earlier process left it) left out."""
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.as_posix() in OWNERS or rel.parts[0].startswith(".") or "migrations" in rel.parts \
                or path == Path(__file__):
            continue
        if not tests and rel.parts[0] in ("tests", "bench"):
            continue
        yield rel.as_posix(), path.read_text()


def _offenders(root: Path) -> list[str]:
    """Every write around the owner in the tree at ``root``, as the three tests below look for them."""
    found = [f"{rel}:{line} writes {expr}" for rel, source in _sources(root=root)
             for line, _, expr in writes(source) if (rel, expr) not in OTHER_CLASSES]
    found += [f"{rel}:{line} calls {expr}" for rel, source in _sources(root=root)
              if not rel.startswith(("store/", "tests/store/")) for line, expr in live_writer_calls(source)]
    found += [f"{rel}:{line} uses {expr}" for rel, source in _sources(tests=False, root=root)
              if not rel.startswith("store/") for line, expr in store_writer_uses(source)]
    return found


def test_the_writer_lists_name_real_writers() -> None:
    """The lists cannot rot: each store writer exists, and the state has live-only writers to guard."""
    for name in STORE_WRITERS | {STORE_APPEND}:
        assert any(hasattr(owner, name) for owner in (Sessions, Reminders, store.media)), name
    assert {"_append", "_replace", "_set_summary", "_reset", "_move_boundary"} <= LIVE_WRITERS


def test_the_owner_is_exactly_the_two_modules_and_a_writer_elsewhere_is_found(tmp_path: Path) -> None:
    """The handle and the manager exist and are the only modules left out; the same writer planted in either is
    allowed, planted beside them (agent/other.py) it is found, all three ways."""
    assert all((ROOT / rel).is_file() for rel in OWNERS)
    writer = "async def w(self, state):\n    state.summary = 's'\n    state._reset(0)\n" \
             "    await self.store.sessions.set_summary(state.session_id, None)\n"
    (tmp_path / "agent").mkdir()
    for rel in (*OWNERS, "agent/other.py"):
        (tmp_path / rel).write_text(writer)
    assert sorted(_offenders(tmp_path)) == ["agent/other.py:2 writes state.summary",
                                            "agent/other.py:3 calls state._reset",
                                            "agent/other.py:4 uses self.store.sessions.set_summary"]


def test_the_checker_finds_each_kind_of_write() -> None:
    source = ("state.messages = []\nst.summary, st.summary_turns = None, 0\nx.context_start_seq += 1\n"
              "del state.messages[3:]\nstate.messages.append(m)\nstate.background.clear()\n"
              "self.messages = []\nstate.messages[0] = m\nobject.x = state.messages\n")
    found = sorted((line, name) for line, name, _ in writes(source))
    assert found == [(1, "messages"), (2, "summary"), (2, "summary_turns"), (3, "context_start_seq"),
                              (4, "messages"), (5, "messages"), (6, "background"), (8, "messages")]


def test_the_checker_finds_a_planted_second_writer() -> None:
    """A summariser that writes the store and mirrors it in memory, as before the owner: both halves found."""
    planted = ("from store.media import rewrite_message\n"
               "async def inject(self, job, state):\n"
               "    await self.store.sessions.set_summary(job.session_id, 's', 1, through_seq=3)\n"
               "    state._set_summary('s', 1, 3)\n"
               "    (seq,) = await self.store.sessions.append(job.session_id, [m])\n"
               "    await store.run(rewrite_message, sid, seq, m)\n"
               "    lines.append(seq)\n")
    assert [line for line, _ in store_writer_uses(planted)] == [1, 3, 5, 6]
    assert live_writer_calls(planted) == [(4, "state._set_summary")]
    assert store_writer_uses("await state.add(m)\nawait live.inject(sid, 's', 1, 3, done)\n") == []


def test_only_the_session_module_writes_session_state_fields() -> None:
    offenders = []
    for rel, source in _sources():
        offenders += [f"{rel}:{line} writes {expr}" for line, _, expr in writes(source)
                      if (rel, expr) not in OTHER_CLASSES]
    assert offenders == []


def test_only_the_session_module_calls_the_live_only_writers() -> None:
    offenders = [f"{rel}:{line} calls {expr}" for rel, source in _sources()
                 if not rel.startswith(("store/", "tests/store/"))  # the store's own private helpers
                 for line, expr in live_writer_calls(source)]
    assert offenders == []


def test_only_the_store_and_the_session_module_write_a_session_to_the_store() -> None:
    """Store and memory change together: whoever writes one writes the other, and that is the owner."""
    offenders = [f"{rel}:{line} uses {expr}" for rel, source in _sources(tests=False) if not rel.startswith("store/")
                 for line, expr in store_writer_uses(source)]
    assert offenders == []
