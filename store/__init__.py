"""Persistence and coordination: tables, engine, migrations, locks, retention."""
