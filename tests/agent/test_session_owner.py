"""The session context has one owner: only agent/session.py writes a :class:`SessionState`'s fields.

Every other module changes a session's context through the state's methods (append, cut_after, replace,
move_boundary, set_summary, reset, ...). This walks the project's source, tests included, for assignments to,
deletions of and in-place changes of an attribute named like one of the state's fields on anything but ``self``.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from agent.session import SessionState

ROOT = Path(__file__).resolve().parents[2]
OWNER = ROOT / "agent" / "session.py"
FIELDS = frozenset(f.name for f in dataclasses.fields(SessionState))
#: list and dict methods that change the object they are called on
MUTATORS = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "update",
                      "setdefault", "popitem", "__setitem__", "__delitem__"})


#: writes of other classes' fields that share a name with one of the state's: (file, the written expression)
OTHER_CLASSES = {
    ("agent/context.py", "turn.messages"),  # a Turn (core/turns.py), a copy being prepared
    ("agent/provider_errors.py", "facts.messages"),  # ErrorFacts, what an error body says
    ("console/data.py", "turns[-1].messages"),  # a ShownTurn, a turn of a transcript page
}


def _field(node: ast.AST) -> str | None:
    """The field name when ``node`` is ``<not self>.<field>`` (or a subscript or slice of one)."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute) and node.attr in FIELDS:
        base = node.value
        if not (isinstance(base, ast.Name) and base.id in ("self", "cls")):
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


def test_the_checker_finds_each_kind_of_write() -> None:
    source = ("state.messages = []\nst.summary, st.summary_turns = None, 0\nx.context_start_seq += 1\n"
              "del state.messages[3:]\nstate.messages.append(m)\nstate.background.clear()\n"
              "self.messages = []\nstate.messages[0] = m\nobject.x = state.messages\n")
    found = sorted((line, name) for line, name, _ in writes(source))
    assert found == [(1, "messages"), (2, "summary"), (2, "summary_turns"), (3, "context_start_seq"),
                              (4, "messages"), (5, "messages"), (6, "background"), (8, "messages")]


def test_only_the_session_module_writes_session_state_fields() -> None:
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        if path == OWNER or parts[0].startswith(".") or "migrations" in parts or path == Path(__file__):
            continue
        rel = path.relative_to(ROOT).as_posix()
        offenders += [f"{rel}:{line} writes {expr}" for line, _, expr in writes(path.read_text())
                      if (rel, expr) not in OTHER_CLASSES]
    assert offenders == []
