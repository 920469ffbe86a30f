"""A turn is passed, not ambient: its arguments travel as ``agent.turn.AgentTurn`` and each tool's ``ToolContext``.

This walks the source of the packages a turn goes through and fails on any ``ContextVar`` they declare, imported
or called under any name. Two are kept, because they are cross-cutting and reach code that never sees a turn:
the usage scope (core/usage.py) and a reply's urgency for the request slots (agent/slots.py).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: the packages a message's turn runs through
PACKAGES = ("agent", "dispatcher", "plugins", "mcp_tools", "knowledge")
#: the cross-cutting context variables (relative paths)
ALLOWED = frozenset({"core/usage.py", "agent/slots.py"})


def context_vars(source: str) -> list[int]:
    """Lines that import ``contextvars`` or ``ContextVar``, or name ``ContextVar`` (a call, an annotation)."""
    lines: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import) and any(a.name == "contextvars" for a in node.names):
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "contextvars":
            lines.append(node.lineno)
        elif isinstance(node, ast.Name) and node.id == "ContextVar":
            lines.append(node.lineno)
        elif isinstance(node, ast.Attribute) and node.attr == "ContextVar":
            lines.append(node.lineno)
    return sorted(set(lines))


def offenders(root: Path = ROOT) -> list[str]:
    """``path:line`` of every context variable in :data:`PACKAGES` outside :data:`ALLOWED`."""
    found: list[str] = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if relative in ALLOWED:
                continue
            found += [f"{relative}:{line}" for line in context_vars(path.read_text(encoding="utf-8"))]
    return found


def test_no_package_a_turn_runs_through_declares_a_context_variable():
    assert offenders() == [], ("a turn's arguments are passed (agent.turn.AgentTurn, ToolContext), not ambient; "
                               "only core/usage.py and agent/slots.py keep a ContextVar")


def test_the_walk_sees_the_packages_and_the_two_kept_ones():
    seen = {p.relative_to(ROOT).as_posix() for package in PACKAGES for p in (ROOT / package).rglob("*.py")}
    assert {"agent/loop.py", "agent/tools/base.py", "dispatcher/handlers.py", "mcp_tools/selection.py",
            "plugins/builtin/knowledge.py", "agent/slots.py"} <= seen
    assert context_vars((ROOT / "agent" / "slots.py").read_text(encoding="utf-8"))
    assert context_vars((ROOT / "core" / "usage.py").read_text(encoding="utf-8"))


def test_a_planted_context_variable_fails_the_guard(tmp_path):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    (tmp_path / "agent" / "slots.py").write_text("from contextvars import ContextVar\nX = ContextVar('x')\n")
    assert offenders(tmp_path) == []
    (tmp_path / "agent" / "loop.py").write_text("from contextvars import ContextVar\n"
                                               "_SINK: ContextVar[object] = ContextVar('sink', default=None)\n")
    (tmp_path / "dispatcher" / "handlers.py").write_text("import contextvars\nM = contextvars.ContextVar('m')\n")
    (tmp_path / "mcp_tools" / "cv.py").write_text("from contextvars import ContextVar as CV\nT = CV('t')\n")
    assert offenders(tmp_path) == ["agent/loop.py:1", "agent/loop.py:2", "dispatcher/handlers.py:1",
                                   "dispatcher/handlers.py:2", "mcp_tools/cv.py:1"]
