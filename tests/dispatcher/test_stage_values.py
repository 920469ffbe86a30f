"""A message's lifecycle is a chain of frozen stage values, each made in one module (dispatcher/*).

received (:class:`IncomingMessage`) → accepted (:class:`Accepted`, made by ``intake.accept``) → journalled
(:class:`Journalled`, by ``journal.journalled``; what intake did with the user message is a type,
:class:`StoredUser` or :class:`Skipped`) → answering (:class:`Answering`, by ``steps.answering``) → answered
(:class:`Answer`, by the steps). This walks the project's source (tests included) for the ways around that:

- a construction of a stage value (``Journalled(...)``) outside the module that makes it;
- a ``dataclasses.replace`` of one outside that module (in ``dispatcher/``, every ``replace`` is listed below
  with what it copies);
- a write of a field of a stage value on anything but ``self`` in ``dispatcher/`` (frozen dataclasses make
  it a runtime error too), or of the one mutable per-message cell, :class:`Ticket`, outside ``dispatcher/queue.py``.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from dispatcher.intake import Accepted
from dispatcher.journal import Journalled, Skipped, StoredUser
from dispatcher.queue import Ticket
from dispatcher.steps import Answer, Answering

ROOT = Path(__file__).resolve().parents[2]
#: each stage value and the one module that makes it
OWNERS: dict[type, str] = {
    Accepted: "dispatcher/intake.py",
    Journalled: "dispatcher/journal.py",
    StoredUser: "dispatcher/journal.py",
    Skipped: "dispatcher/journal.py",
    Answering: "dispatcher/steps.py",
    Answer: "dispatcher/steps.py",
}
NAMES = {cls.__name__: owner for cls, owner in OWNERS.items()}
#: the fields of the stage values (written by nobody: they are frozen)
FIELDS = frozenset(f.name for cls in OWNERS for f in dataclasses.fields(cls))
#: the ticket's state, written by dispatcher/queue.py alone
TICKET_FIELDS = frozenset(Ticket.__slots__)
#: every ``dataclasses.replace`` in dispatcher/: (file, what it copies). A stage value's is its owner's.
REPLACES = {
    ("dispatcher/background.py", "msg"),  # an IncomingMessage, marked as the end of its background
    ("dispatcher/intake.py", "msg"),  # an IncomingMessage given a message id
    ("dispatcher/resume.py", "msg"),  # an IncomingMessage marked as answered after a restart
    ("dispatcher/resume.py", "info"),  # a SessionInfo kept in the session it was journalled in
    ("dispatcher/steps.py", "a"),  # an Answering, handed on with its media made ready
    ("dispatcher/steps.py", "done"),  # an Answer, after the after_reply hooks
}


def sources() -> dict[str, str]:
    skip = {Path(__file__).resolve()}
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if path.resolve() in skip or rel.startswith((".", "venv/", "site/")) or "/." in rel:
            continue
        found[rel] = path.read_text(encoding="utf-8")
    return found


def _called(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _not_self(node: ast.AST) -> bool:
    return not (isinstance(node, ast.Name) and node.id in ("self", "cls"))


def _targets(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.Assign | ast.Delete):
        return list(node.targets)
    if isinstance(node, ast.AugAssign | ast.AnnAssign):
        return [node.target]
    return []


def violations(files: dict[str, str]) -> list[str]:
    """Each second maker or writer of a stage value in ``files`` (path relative to the root → source)."""
    found = []
    for rel, source in files.items():
        in_dispatcher = rel.startswith("dispatcher/")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call):
                name = _called(node)
                if name in NAMES and NAMES[name] != rel:
                    found.append(f"{rel}:{node.lineno}: makes a {name} (only {NAMES[name]} does)")
                if name == "replace" and in_dispatcher and node.args:
                    copied = ast.unparse(node.args[0])
                    if (rel, copied) not in REPLACES:
                        found.append(f"{rel}:{node.lineno}: replace({copied}, ...) is not a listed copy")
                if name in ("setattr", "__setattr__") and in_dispatcher:
                    found.append(f"{rel}:{node.lineno}: {name} in dispatcher/")
            for target in _targets(node):
                while isinstance(target, ast.Subscript):
                    target = target.value
                if not isinstance(target, ast.Attribute) or not _not_self(target.value):
                    continue
                if target.attr in TICKET_FIELDS and rel != "dispatcher/queue.py":
                    found.append(f"{rel}:{node.lineno}: writes a ticket's {target.attr} (only queue.py does)")
                elif in_dispatcher and target.attr in FIELDS:
                    found.append(f"{rel}:{node.lineno}: writes {ast.unparse(target)}, a stage value's field")
    return found


def test_the_stage_values_are_frozen() -> None:
    for cls in OWNERS:
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls  # type: ignore[attr-defined]


def test_each_stage_value_is_made_by_its_own_module_and_written_by_none() -> None:
    assert violations(sources()) == []


def test_the_ticket_is_the_one_mutable_thing_and_queue_py_its_writer() -> None:
    assert not dataclasses.is_dataclass(Ticket)
    assert TICKET_FIELDS == {"accepted", "recorded", "_stage"}


def test_a_planted_second_writer_fails_the_guard() -> None:
    files = sources()
    path = "dispatcher/answering.py"
    planted = {
        "a second maker": "j = Journalled(j.accepted, j.inbox_id, None)\n",
        "a copy outside its owner": "j = dataclasses.replace(j, user_seq=None)\n",
        "a field written": "j.user_seq = 3\n",
        "a setattr around frozen": "object.__setattr__(j, 'reply', 'x')\n",
        "the ticket's stage written": "ticket._stage = 2\n",
    }
    for what, line in planted.items():
        found = violations({path: files[path] + line})
        assert found and all(f.startswith(f"{path}:") for f in found), what
    # and outside the dispatcher package, a maker is caught too
    assert violations({"plugins/x.py": "from dispatcher.steps import Answer\nAnswer('ok', 'hi')\n"})
