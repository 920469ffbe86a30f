"""Shared fixtures: a database URL for every backend, and an opened conversation store.

``db_url`` runs a test on SQLite (a file in ``tmp_path``) and on PostgreSQL when ``TEST_DATABASE_URL``
is set (skipped otherwise). Each PostgreSQL test gets its own empty schema, dropped afterwards.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from config.settings import normalise_db_url
from store.store import Store

logger = logging.getLogger(__name__)

TEST_DATABASE_URL = os.environ.get("TEST_DATABASE_URL", "")


def _libpq_url(url: str) -> str:
    """The URL without a SQLAlchemy driver, for psycopg itself."""
    scheme, rest = url.split("://", 1)
    return "postgresql://" + rest if scheme.startswith("postgres") else url


@pytest.fixture(params=[
    "sqlite",
    pytest.param("postgresql", marks=pytest.mark.skipif(not TEST_DATABASE_URL, reason="TEST_DATABASE_URL not set")),
])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A SQLAlchemy URL of an empty database, as ``normalise_db_url`` makes them."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'chatbot.db'}"
        return
    import psycopg

    schema = f"test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(_libpq_url(TEST_DATABASE_URL), autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    url = normalise_db_url(TEST_DATABASE_URL, tmp_path)
    sep = "&" if "?" in url else "?"
    try:
        yield f"{url}{sep}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(_libpq_url(TEST_DATABASE_URL), autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[Store]:
    """A Store opened (and migrated) on ``db_url``; closed afterwards."""
    s = Store(db_url)
    await s.open()
    try:
        yield s
    finally:
        await s.close()
