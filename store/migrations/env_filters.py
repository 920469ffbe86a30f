"""What Alembic's autogenerate compares: the models' tables, not the history-search index (memory/search.py)."""

from __future__ import annotations

from typing import Any

from store.history_search import is_search_table


def include_name(name: str | None, type_: str, _parent_names: Any) -> bool:
    """False for the search index and its SQLite shadow tables, which migration 0002 manages by hand."""
    return not (type_ == "table" and name is not None and is_search_table(name))
