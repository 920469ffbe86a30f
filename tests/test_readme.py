"""README.md tells a newcomer how long the suite takes and how to run the fast unit layer alone (issue 29 item 9),
and that layer is what the README says: no test outside ``tests/e2e/`` starts ``app.py``."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UNIT_LAYER = "python -m pytest tests --ignore=tests/e2e"


def _tests_section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("\n## Tests\n")
    return text[start:text.index("\n## ", start + 1)]


def test_the_readme_gives_the_suites_duration_and_the_unit_layer_command() -> None:
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
