"""What logs and pages show of the config: the secrets in force masked, the database URL without its password."""

from __future__ import annotations

import re
from urllib.parse import unquote

from config.settings import Config, secret_values


class Redactor:
    """Replaces the secrets in force with ``[secret]`` in every log line (tracebacks included)."""

    def __init__(self) -> None:
        self.secrets: list[str] = []

    def update(self, cfg: Config) -> None:
        """Take the secrets of ``cfg`` (called again after every config change)."""
        values = secret_values(cfg) | {_db_password(cfg.db_url)}
        # longest first, so a secret containing another is masked whole
        self.secrets = sorted((v for v in values if v and len(v) >= 4), key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, "[secret]")
        return text


#: A database URL's scheme and user information, as SQLAlchemy's ``make_url`` reads them (``name://user:password@``):
#: the password is what lies between the user's ``:`` and the ``@``.
_URL_USER = re.compile(r"^(?P<head>[\w+]+://[^:/@]*:)(?P<password>[^@]*)@")


def _db_password(url: str) -> str:
    match = _URL_USER.match(url)
    return unquote(match["password"]) if match else ""


def database_label(cfg: Config) -> str:
    """The database URL with any password hidden (``***``), as configured otherwise."""
    url = cfg.database_url()
    match = _URL_USER.match(url)
    if match:
        return f"{match['head']}***@{url[match.end():]}"
    return url if "@" not in url or re.match(r"^[\w+]+://[^:/@]*@", url) else "(unparsable URL)"


__all__ = ["Redactor", "database_label"]
