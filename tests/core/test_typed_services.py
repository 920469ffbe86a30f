"""Collaborators are typed and injected, not probed (architecture, typed services).

The settings, the store, the session manager and the services are passed with their types: a parameter or
field named ``cfg``, ``config``, ``store``, ``sessions`` or ``services`` annotated ``Any`` (or a config
provider annotated ``Callable[[], Any]``) hides what a module needs from its readers and from checkers.
A collaborator's optional ability is a Protocol checked with ``isinstance`` (``StreamingLLM``,
``SlottedLLM``, ``Transcriber``), not ``getattr(x, "name", None)``. This walks the application's source
(tests and benchmarks are free to use fakes).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: parameter and field names that stand for the application's parts
COLLABORATORS = frozenset({"cfg", "config", "store", "sessions", "services"})
#: folders that are not the application
OUTSIDE = frozenset({"tests", "bench", "migrations", "docs"})
#: attribute probes that read data, not a collaborator: (file, the probed expression)
DATA_PROBES = {
    ("channels/telegram/incoming.py", "message"),  # which content field a Telegram message carries
    ("channels/telegram/channel.py", "update"),  # an update id for a log line, whatever arrived
    ("console/server.py", "site._server"),  # aiohttp's bound sockets, to tell the port really bound
    ("config/plugin_settings.py", "module"),  # a plugin module's optional Settings class
    ("plugins/manager.py", "obj"),  # a plugin object's optional name
    ("bootstrap/preflight.py", "record"),  # a log record's optional "console" flag
    ("bootstrap/preflight.py", "exc"),  # a database error's driver error, when it wraps one
    ("config/settings.py", "exc"),  # an OSError's strerror, when it has one
    ("store/engine.py", "exc.orig"),  # sqlite3's error code, on Pythons that have it
    ("channels/wecom/api.py", "exc.response"),  # the HTTP status of a failed WeCom call, when there was a response
    ("channels/wecom/callback.py", "site._server"),  # aiohttp's bound sockets, to tell the port really bound
}


def _loose(annotation: ast.expr | None) -> bool:
    """True for ``Any`` and ``Callable[[], Any]`` (also with ``| None``)."""
    if annotation is None:
        return False
    text = ast.unparse(annotation).replace(" ", "")
    return text in ("Any", "Any|None", "Callable[[],Any]", "Callable[[],Any]|None")


def loose_collaborators(source: str) -> list[tuple[int, str]]:
    """(line, name) of each parameter or annotated field named like a collaborator and typed ``Any``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.arg) and node.arg in COLLABORATORS and _loose(node.annotation):
            found.append((node.lineno, node.arg))
        elif (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
              and node.target.id in COLLABORATORS and _loose(node.annotation)):
            found.append((node.lineno, node.target.id))
    return sorted(found)


def probes(source: str) -> list[tuple[int, str]]:
    """(line, probed expression) of each ``getattr(x, "literal", default)``: an attribute that may be missing."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                and len(node.args) == 3 and isinstance(node.args[1], ast.Constant)):
            found.append((node.lineno, ast.unparse(node.args[0])))
    return sorted(found)


def application_sources() -> list[tuple[str, str]]:
    """(path relative to the project, source) of every module of the application."""
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        if parts[0].startswith(".") or OUTSIDE.intersection(parts) or "site-packages" in parts:
            continue
        out.append(("/".join(parts), path.read_text(encoding="utf-8")))
    return out


def test_the_checkers_find_what_they_look_for() -> None:
    source = ("def f(cfg: Any, config: Callable[[], Any], store: Store, other: Any,\n"
              "      services: Any | None = None): ...\n"
              "class C:\n    sessions: Any\n    store: Store\n"
              "x = getattr(llm, 'slots', None)\ny = getattr(cfg, name)\nz = getattr(a.b, 'c', 1)\n")
    assert loose_collaborators(source) == [(1, "cfg"), (1, "config"), (2, "services"), (4, "sessions")]
    assert probes(source) == [(6, "llm"), (8, "a.b")]


def test_the_application_has_sources_to_check() -> None:
    files = {name for name, _ in application_sources()}
    assert {"app.py", "agent/loop.py", "dispatcher/dispatcher.py", "channels/telegram/channel.py"} <= files
    assert not any(name.startswith(("tests/", "bench/")) for name in files)


def test_collaborators_are_typed() -> None:
    offenders = [f"{name}:{line}: {param}" for name, source in application_sources()
                 for line, param in loose_collaborators(source)]
    assert offenders == []


def test_no_collaborator_is_found_by_getattr() -> None:
    offenders = [f"{name}:{line}: getattr({expr}, ...)" for name, source in application_sources()
                 for line, expr in probes(source) if (name, expr) not in DATA_PROBES]
    assert offenders == []
