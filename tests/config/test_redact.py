"""config/redact.py reads a database URL's password as SQLAlchemy does (config sits below store, so it
cannot ask SQLAlchemy itself): what the redactor masks and what the log shows must not differ from it."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url

from config.redact import Redactor, database_label
from config.settings import Config

URLS = [
    "postgresql+psycopg://bot:s3cret@127.0.0.1:5432/bot",
    "postgresql+psycopg://bot:s%40cr%2Fet@db.example:5432/bot?options=-csearch_path%3Dx",
    "postgresql+psycopg://bot:p/w:x@h:1/db",
    "postgresql+psycopg://:only-password@h/db",
    "postgresql+psycopg://bot@h/db",
    "postgresql+psycopg://h/db",
]


@pytest.mark.parametrize("url", URLS)
def test_the_label_and_the_masked_password_are_sqlalchemys(url: str, tmp_path) -> None:
    cfg = Config(data_dir=str(tmp_path), db_url=url)
    assert database_label(cfg) == make_url(cfg.database_url()).render_as_string(hide_password=True)
    redact = Redactor()
    redact.update(cfg)
    password = make_url(url).password
    if password:
        assert password not in redact(f"could not connect as bot:{password}")
    else:
        assert redact.secrets == [s for s in redact.secrets if s not in url]


def test_a_sqlite_url_is_shown_as_it_is(tmp_path) -> None:
    cfg = Config(data_dir=str(tmp_path))
    assert database_label(cfg) == cfg.database_url()
