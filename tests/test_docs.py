"""The documentation in docs/ cannot drift from the code it describes (issue 41 item 6): the key table of
docs/configuration.md is the settings model's (``docs/gen_config.py`` writes it), every built-in command is on
docs/commands.md, and no page links outside docs/ (``mkdocs build --strict`` in ``.ci/run`` checks the rest of
the links and anchors)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from config.settings import Config
from tests.test_readme import LINK, builtin_commands, table_commands

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_config", DOCS / "gen_config.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_key_table_is_the_settings_models() -> None:
    gen = _generator()
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert gen.render(text) == text, "docs/configuration.md differs from Config: run python docs/gen_config.py"
    assert list(gen.meanings(text)) == list(Config.model_fields)
    assert gen.missing_meanings(text) == [], "write the meaning of these keys in docs/configuration.md"


def test_the_generator_adds_a_new_key_and_drops_a_gone_one(monkeypatch) -> None:
    gen = _generator()
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    rows = gen.rows()
    monkeypatch.setattr(gen, "rows", lambda: [*rows[1:], ("brand_new_key", "string", '`""`', "")])
    changed = gen.render(text)
    assert "| `brand_new_key` | string | `\"\"` |  |  |" in changed
    assert f"| `{rows[0][0]}` |" not in changed
    assert gen.missing_meanings(changed) == ["brand_new_key"]


def test_every_builtin_command_is_documented() -> None:
    documented = table_commands((DOCS / "commands.md").read_text(encoding="utf-8"))
    assert documented == builtin_commands()


def test_no_page_links_outside_the_docs() -> None:
    outside = [(page.name, target) for page in DOCS.glob("*.md")
               for target in LINK.findall(page.read_text(encoding="utf-8"))
               if not re.match(r"https?://", target) and (target.startswith("/") or "../" in target)]
    assert outside == []
