"""README.md is a user's first screen (issue 41 item 6): short, its links lead somewhere, its commands are the
bot's, and its ``config.json`` snippets are valid settings. The developers' page tells a newcomer how long the
suite takes and how to run the fast unit layer alone (issue 29 item 9), and that layer is what it says: no test
outside ``tests/e2e/`` starts ``app.py``."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

from config.settings import Config
from plugins.manager import BUILTIN_PLUGINS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
UNIT_LAYER = "python -m pytest tests --ignore=tests/e2e"
#: the README stays a first screen; new features each add a short section of their own
MOST_LINES = 300
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def builtin_commands() -> set[str]:
    """The names of the commands the built-in plugins register, as the bot registers them at start."""
    names: set[str] = set()
    for plugin in BUILTIN_PLUGINS:
        module = importlib.import_module(f"plugins.builtin.{plugin}")
        if hasattr(module, "register_commands"):
            module.register_commands(lambda name, *args, **kwargs: names.add(name))
    return names


def table_commands(text: str) -> set[str]:
    """The command names in the first column of the Markdown tables of ``text``."""
    found = set()
    for line in text.splitlines():
        if line.startswith("| `/"):
            first = line.split("|")[1]
            found.update(re.findall(r"`/([a-z_]+)", first))
    return found


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_the_readme_is_a_first_screen() -> None:
    lines = _readme().splitlines()
    assert len(lines) <= MOST_LINES, f"README.md has {len(lines)} lines: move details to a page in docs/"


def test_every_link_of_the_readme_leads_somewhere() -> None:
    text = _readme()
    anchors = {github_anchor(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}
    broken = []
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        if path and not (ROOT / path).exists():
            broken.append(target)
        elif not path and anchor not in anchors:
            broken.append(target)
    assert broken == []
    assert "../" not in "".join(LINK.findall(text))


def test_the_readmes_commands_are_the_bots() -> None:
    listed = table_commands(_readme())
    assert listed, "README.md has no commands table"
    assert listed <= builtin_commands(), f"not commands of the bot: {sorted(listed - builtin_commands())}"


def test_the_readmes_config_snippets_are_valid_settings() -> None:
    snippets = re.findall(r"```json\n(.*?)```", _readme(), re.S)
    assert len(snippets) >= 3
    for snippet in snippets:
        Config.model_validate(json.loads(snippet))


def _tests_section() -> str:
    text = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    start = text.index("\n## Tests\n")
    return text[start:text.index("\n## ", start + 1)]


def test_the_docs_give_the_suites_duration_and_the_unit_layer_command() -> None:
    section = _tests_section()
    assert f"```bash\n{UNIT_LAYER}\n```" in section
    assert re.search(r"The whole suite takes \d+ to \d+ minutes on two cores", section)
    assert re.search(r"the unit\s+layer leaves them out and\s+takes about \d+ minutes", section)


def test_no_test_outside_the_end_to_end_folder_starts_the_app() -> None:
    starters = re.compile(r"BotProcess|pexpect|Cluster\(|/ \"app\.py\"")
    found = [path.relative_to(ROOT).as_posix() for path in (ROOT / "tests").rglob("test_*.py")
             if "e2e" not in path.relative_to(ROOT).parts and path != Path(__file__).resolve()
             and starters.search(path.read_text(encoding="utf-8"))]
    assert found == []
    assert (ROOT / "tests" / "e2e").is_dir()
