"""A real installed distribution for tests: files plus a ``.dist-info`` with entry points, on ``sys.path``.

``importlib.metadata`` finds it exactly as it finds a package installed by pip, so entry-point discovery is
exercised for real, without mocks.
"""

from __future__ import annotations

import logging
from pathlib import Path

logger = logging.getLogger(__name__)


def write_distribution(root: Path, name: str, *, files: dict[str, str],
                       entry_points: dict[str, dict[str, str]], version: str = "0.1.0") -> Path:
    """Write the package ``files`` and ``<name>-<version>.dist-info`` under ``root``; return ``root``.

    Put ``root`` on ``sys.path`` (``monkeypatch.syspath_prepend``) to install it.
    """
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8")
    sections = []
    for group, entries in entry_points.items():
        sections.append(f"[{group}]\n" + "".join(f"{key} = {value}\n" for key, value in entries.items()))
    (info / "entry_points.txt").write_text("\n".join(sections), encoding="utf-8")
    (info / "RECORD").write_text("", encoding="utf-8")
    return root


DOCS = Path(__file__).resolve().parents[2] / "docs"


def doc_example(page: str, section: str) -> tuple[str, str, dict[str, dict[str, str]]]:
    """The worked example of a section of ``docs/<page>``: ``(module name, module source, entry points)``.

    The section's ```python block starts with ``# <module>.py``; its ```toml block declares the entry points.
    """
    import re
    import tomllib

    text = (DOCS / page).read_text(encoding="utf-8")
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    body = text[start:end if end != -1 else len(text)]
    code = re.search(r"```python\n# (\w+)\.py\n(.*?)```", body, re.S)
    toml = re.search(r"```toml\n(.*?)```", body, re.S)
    assert code is not None and toml is not None, f"docs/{page} section {section!r} lacks its example"
    entry_points = tomllib.loads(toml.group(1))["project"]["entry-points"]
    return code.group(1), code.group(2), entry_points
