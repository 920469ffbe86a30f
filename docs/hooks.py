"""MkDocs hooks (mkdocs.yml ``hooks``): the repository's BENCHMARKS.md becomes the site's page ``benchmarks.md``.

BENCHMARKS.md stays at the repository root, where the benchmark scripts' readers look for it; the site shows the
same file, so a docs page links to it as ``benchmarks.md``.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

BENCHMARKS = Path(__file__).resolve().parent.parent / "BENCHMARKS.md"


def on_files(files, config):
    """Add BENCHMARKS.md to the site as ``benchmarks.md``."""
    files.append(File.generated(config, "benchmarks.md", content=BENCHMARKS.read_text(encoding="utf-8")))
    return files
