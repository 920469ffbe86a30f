"""The documentation in docs/ cannot drift from the code it describes (issue 41 item 6): the key table of
docs/configuration.md is the settings model's and its meanings are the keys' help (config/help.py, which the
console's config form shows; ``docs/gen_config.py`` writes the table), every built-in command is on
docs/commands.md, and no page links outside docs/ (``mkdocs build --strict`` in ``.ci/run`` checks the rest of
the links and anchors)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import config.help
from config.help import KEY_HELP
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
    assert gen.missing_meanings(text) == [], "write the help of these keys in config/help.py"


def test_each_meaning_is_the_keys_help_word_for_word() -> None:
    """The page sets names and values as code and links the page that says more; the words are the help's."""
    gen = _generator()
    for key, meaning in gen.meanings((DOCS / "configuration.md").read_text(encoding="utf-8")).items():
        words = meaning.removesuffix(f" See [{gen.SEE[key][0]}]({gen.SEE[key][1]}).") if key in gen.SEE else meaning
        assert words.replace("`", "").replace("&lt;", "<") == KEY_HELP[key], key
    assert set(gen.SEE) <= set(KEY_HELP)


def test_a_key_without_help_has_no_meaning_and_fails(monkeypatch) -> None:
    gen = _generator()
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    monkeypatch.setattr(config.help, "KEY_HELP", {k: v for k, v in KEY_HELP.items() if k != "cleanup_hour"})
    changed = gen.render(text)
    assert "| `cleanup_hour` | integer 0–23 | `3` |  |  |" in changed
    assert gen.missing_meanings(changed) == ["cleanup_hour"]


def test_the_help_becomes_markdown() -> None:
    gen = _generator()
    assert gen.markdown('Entries "a:b" for channel_type; /auth <password> or /kb add, a | b <x, 2*3.') == (
        'Entries `"a:b"` for `channel_type`; `/auth <password>` or `/kb add`, a \\| b &lt;x, 2\\*3.')


def test_the_generator_adds_a_new_key_and_drops_a_gone_one(monkeypatch) -> None:
    gen = _generator()
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    rows = gen.rows()
    monkeypatch.setattr(gen, "rows", lambda: [*rows[1:], ("brand_new_key", "string", '`""`', "", "")])
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
