"""Alembic environment: runs on the store's connection, or on a URL for developers' command-line use."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from alembic import context
from sqlalchemy.engine import Connection

from store.migrations.env_filters import include_name
from store.models import Base

logger = logging.getLogger(__name__)

config = context.config
target_metadata = Base.metadata


def _configure(**kwargs) -> None:
    context.configure(target_metadata=target_metadata, compare_type=True, include_name=include_name, **kwargs)


def _run_on(connection: Connection) -> None:
    # SQLite cannot ALTER most things; batch mode copies the table instead.
    _configure(connection=connection, render_as_batch=connection.dialect.name == "sqlite")
    with context.begin_transaction():
        context.run_migrations()


def _cli_url() -> str:
    url = config.get_main_option("sqlalchemy.url") or os.environ.get("DB_URL", "")
    if url:
        from config.settings import normalise_db_url

        return normalise_db_url(url, Path("data").resolve())
    from config.settings import load_config

    return load_config("config.json").database_url()


async def _run_on_url(url: str) -> None:
    from store.engine import open_database

    database = open_database(url)  # the store's own engine setup, so SQLite gets the same pragmas and BEGIN
    try:
        await database.run(_run_on)
    finally:
        await database.close()


def run_migrations_offline() -> None:
    """Emit SQL to stdout instead of running it."""
    _configure(url=_cli_url(), literal_binds=True, dialect_opts={"paramstyle": "named"})
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run on the connection the store passed in, or open one from the URL."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_on(connection)
        return
    asyncio.run(_run_on_url(_cli_url()))


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
