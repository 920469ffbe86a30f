"""The exception tree of the bot.

::

    BotError
     ├── ConfigError            a config file or value is invalid
     └── LLMError               the model call failed
          ├── ContextOverflowError   the provider says the request is too long
          ├── TransientLLMError      timeout, connection error, 429, 5xx, a proxy's HTML page (retried)
          │    ├── EndpointRefusedError   nothing listens at open_ai_api_base (retried, then named)
          │    ├── EndpointUnresolvedError   the host name of open_ai_api_base does not resolve (retried, then named)
          │    └── StreamCutError         a streamed answer ended without a finish reason (retried, never an answer)
          ├── QuotaLLMError          quota, billing or a suspended account (never retried)
          ├── AuthLLMError           the provider refused the key (401/403, or Gemini's 400)
          ├── ModelNotFoundError     the provider does not know the model (names it)
          ├── EndpointNotFoundError  open_ai_api_base answers 404 for /chat/completions (no /v1?)
          ├── ToolsUnsupportedError  the server cannot take tools for this model
          ├── ImagesUnsupportedError the server cannot take image parts for this model
          ├── NotConfiguredError     no key and no custom endpoint
          └── OtherLLMError          anything else (e.g. a generic 400)

User-facing wording lives at the edge (the dispatcher), not in these classes.
"""

from __future__ import annotations


class BotError(Exception):
    """Root of every error the bot raises on purpose."""


class ConfigError(BotError):
    """A config file or value is invalid; the message names the key."""


class LLMError(BotError):
    """A model call failed."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class ContextOverflowError(LLMError):
    """The provider rejected the request as longer than the model's context window."""


class TransientLLMError(LLMError):
    """A failure worth retrying: timeout, connection error, 429 or 5xx."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message, status=status, code=code)
        self.retry_after = retry_after


class EndpointRefusedError(TransientLLMError):
    """The model endpoint refused the connection: usually a local server that is not running."""


class EndpointUnresolvedError(TransientLLMError):
    """The host name of the model endpoint does not resolve: a typo, or no network (retried, then named)."""


class StreamCutError(TransientLLMError):
    """A streamed answer ended without a finish reason: the server dropped or cut it (an empty 200 stream is
    one). It is a failed call, retried, and never stored or shown as an answer."""


class EndpointNotFoundError(LLMError):
    """The endpoint answered 404 for the chat-completions path itself: usually a base URL without ``/v1``."""


class QuotaLLMError(LLMError):
    """The account needs attention: quota used up, no balance, billing arrears or a suspended account."""


class ModelNotFoundError(LLMError):
    """The provider does not know the requested model (or Azure deployment)."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None,
                 model: str | None = None) -> None:
        super().__init__(message, status=status, code=code)
        self.model = model


class ToolsUnsupportedError(LLMError):
    """The server cannot take tools for this model; the client retries without them."""


class ImagesUnsupportedError(LLMError):
    """The server cannot take image parts for this model; the turn is asked again without the image."""


class AuthLLMError(LLMError):
    """The provider refused the credentials."""


class NotConfiguredError(LLMError):
    """No API key and no custom endpoint are configured."""


class OtherLLMError(LLMError):
    """Any other provider error, such as a generic 400. Never treated as an overflow."""
