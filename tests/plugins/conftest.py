"""Plugin tests never see real secrets from the environment."""

from __future__ import annotations

import pytest

from config.settings import ENV_OVERRIDES


@pytest.fixture(autouse=True)
def _no_secret_env(monkeypatch):
    for var in ENV_OVERRIDES:
        monkeypatch.delenv(var, raising=False)
