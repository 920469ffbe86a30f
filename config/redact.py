"""What logs and pages show of the config: the secrets in force masked, the database URL without its password."""

from __future__ import annotations

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


def _db_password(url: str) -> str:
    if "://" not in url or "@" not in url:
        return ""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).password or ""
    except Exception:  # noqa: BLE001 - a malformed URL fails later, with its own message
        return ""


def database_label(cfg: Config) -> str:
    """The database URL with any password hidden."""
    url = cfg.database_url()
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - shown as configured when SQLAlchemy cannot parse it
        return url if "@" not in url else "(unparsable URL)"


__all__ = ["Redactor", "database_label"]
