"""The entry point: load and check the config, then run the bot (bootstrap/runner.py) until it is stopped.

Usage: ``python app.py [--config PATH]``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Any

from agent.tokens import check_context_window
from bootstrap.first_run import create_config
from bootstrap.preflight import (
    SETUP_ERROR,
    Migration,
    SetupError,
    channel_problems,
    check_channels,
    check_data_dir,
    check_database,
    lock_database,
    setup_logging,
)
from channels.registry import check_channel_type
from channels.terminal import screen_is_ours
from config.settings import load_config
from core import heap
from core.errors import ConfigError

logger = logging.getLogger("app")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description="An LLM chatbot that never loses what people said.")
    parser.add_argument("--config", default=None, help="path to config.json (default: ./config.json)")
    args = parser.parse_args(argv)
    # Everything the bot writes (database, memory files, log, config.json) is for its owner's eyes only.
    os.umask(0o077)
    heap.limit_arenas()
    path = Path(args.config or "config.json").expanduser().resolve()
    if args.config is not None and not path.is_file():
        what = "is a folder, not a file" if path.is_dir() else "does not exist"
        print(f"config error: {path} {what}", file=sys.stderr)
        return SETUP_ERROR
    # a fresh clone has no config.json (git ignores it, so a key typed into it is never committed): write one
    created = args.config is None and create_config(path)
    notes: list[str] = []
    try:
        cfg = load_config(path, notes=notes)
        check_channel_type(cfg)  # the registry knows the channels; the config model does not
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return SETUP_ERROR
    try:
        check_data_dir(cfg)
        lock_database(cfg)
        check_database(cfg)
        check_channels(cfg)
        # in a child process, while this one imports the bot's parts (bootstrap.runner below)
        migration = Migration(cfg)
        window_note = check_context_window(cfg.model, cfg.model_context_window) if cfg.model_configured else None
    except SetupError as exc:
        print(f"setup error: {exc}", file=sys.stderr)
        return SETUP_ERROR
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return SETUP_ERROR
    from bootstrap.runner import App  # the bot's parts: most of the start's imports, beside the migration

    try:
        migrated = migration.wait()
    except SetupError as exc:
        print(f"setup error: {exc}", file=sys.stderr)
        return SETUP_ERROR
    interactive = screen_is_ours(cfg)
    redact = setup_logging(cfg, quiet_console=interactive)
    if created:
        logger.info("created %s with the default settings (git ignores it)", path)
    if migrated:
        logger.info("%s", migrated)
    for note in [*notes, *([window_note] if window_note else [])]:
        logger.warning("config: %s", note)
    for name, why in channel_problems(cfg).items():
        logger.warning("channel %s cannot run: %s", name, why)
    app = App(path)
    app.redact = redact
    return run_loop(app.run(cfg))


def run_loop(main_coro: Any) -> int:
    """Run on uvloop where it is installed (it is on Linux and macOS), else on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main_coro)
    return uvloop.run(main_coro)


if __name__ == "__main__":
    sys.exit(main())
