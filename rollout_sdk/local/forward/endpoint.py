"""Where ``rollout-sdk test``'s chat calls go, and what is sent there.

:class:`Endpoint` is the base URL, the model name as sent, the credentials and the per-call
timeout (:func:`resolve_endpoint` builds it from the command's options, :func:`resolve_model`
maps v1's model names, :func:`read_key_file` reads ``--api-key-file``). :func:`map_chat_body`
turns the kit's chat body into an OpenAI one:

- ``model`` is the one the command was given (the agent's ``model``, "default" unless it passes
  one, means nothing to TrainGate either);
- the tools the rollout's init answered with are sent as OpenAI ``tools`` (unless the agent
  passes ``tools`` itself);
- ``rollout_id`` (TrainGate's routing key) and ``logprobs``/``top_logprobs`` (TrainGate records
  logprobs for training; reasoning models refuse the field) are dropped;
- ``temperature``, ``top_p`` and ``max_tokens`` at the values the kit fills in when an agent
  passes none (1.0, 1.0, 512) are dropped unless the rollout's completion params set them, so
  the model's own defaults apply, as in v1's test mode, which sent only what the agent passed;
- ``max_tokens`` is sent as ``max_completion_tokens`` to api.openai.com (its newer models refuse
  ``max_tokens``) and as is elsewhere (:attr:`Endpoint.token_field`); a 400 that names the field
  sent is answered by sending the other name once (:func:`other_token_field`), and that name is
  used from then on.

The key is sent in the ``Authorization`` header only, and removed from any text of the
endpoint's that is kept or shown. User info in ``--base-url`` (``user:password@``) is taken out
of the URL and sent as HTTP Basic credentials instead of a key; the URL is shown with it, and
with its query values (but ``api-version``), as ``***`` (:func:`rollout_sdk.hosts.redact_url`).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from rollout_sdk.errors import ConfigurationError
from rollout_sdk.hosts import (
    REDACTED,
    redact_text,
    redact_url,
    split_credentials,
    url_secrets,
    user_info_secrets,
)

OPENAI_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-5-mini"
DEFAULT_TIMEOUT_SECONDS = 300.0
#: The values the kit's chat body carries when the agent passes none (RolloutLLMClient).
KIT_FILLERS: dict[str, Any] = {"temperature": 1.0, "top_p": 1.0, "max_tokens": 512}
#: Fields of the kit's chat body that are TrainGate's, not the model's.
DROPPED = frozenset({"rollout_id", "logprobs", "top_logprobs", "model"})
#: The two names of the token limit: most endpoints' and api.openai.com's newer models'.
TOKEN_FIELDS = ("max_tokens", "max_completion_tokens")
#: The longest first line ``--api-key-file`` reads (a key file holds one short line).
MAX_KEY_LINE = 16 * 1024


@dataclass(frozen=True, repr=False)
class Endpoint:
    """Where chat calls go: ``base_url`` (no trailing ``/``, no user info; a query is kept), the
    model name as sent, the key, the per-call timeout, and the user info ``--base-url`` had
    (``user:password`` as written), sent as HTTP Basic credentials when there is no key.

    None of the credentials is ever shown: the repr and :meth:`shown` give the URL as
    :func:`~rollout_sdk.hosts.redact_url` shows it, and :meth:`redact` cuts them from text.
    """

    base_url: str
    model: str
    api_key: str | None = None
    timeout: float = DEFAULT_TIMEOUT_SECONDS
    user_info: str | None = None

    def __repr__(self) -> str:
        return f"Endpoint(base_url={self.shown()!r}, model={self.model!r}, timeout={self.timeout})"

    def at(self, path: str) -> str:
        """The URL of ``path`` under the base (before its query)."""
        parts = urlsplit(self.base_url)
        return urlunsplit(parts._replace(path=parts.path + path))

    @property
    def chat_url(self) -> str:
        return self.at("/chat/completions")

    def shown(self, path: str = "") -> str:
        """The base URL (or that of ``path`` under it) as shown: user info as ``***@``, query
        values as ``***``."""
        url = redact_url(self.at(path))
        if self.user_info is not None:
            scheme, sep, rest = url.partition("://")
            url = f"{scheme}{sep}{REDACTED}@{rest}"
        return url

    @property
    def is_openai(self) -> bool:
        return urlsplit(self.base_url).hostname == "api.openai.com"

    @property
    def token_field(self) -> str:
        """The name the token limit is first sent under: ``max_completion_tokens`` to
        api.openai.com (its newer models refuse ``max_tokens``), ``max_tokens`` elsewhere."""
        return "max_completion_tokens" if self.is_openai else "max_tokens"

    @property
    def _basic(self) -> str | None:
        """The user info as HTTP Basic credentials (percent-decoded, UTF-8), None without it."""
        if self.user_info is None:
            return None
        user, _, password = self.user_info.partition(":")
        return base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode()

    @property
    def authorization(self) -> bytes | None:
        """The ``Authorization`` header: the key as a Bearer token, else the URL's user info as
        HTTP Basic credentials, else None."""
        if self.api_key:
            return b"Bearer " + self.api_key.encode()
        return None if self._basic is None else f"Basic {self._basic}".encode()

    @cached_property
    def _secrets(self) -> list[str]:
        found = [self.api_key or "", self._basic or "", *url_secrets(self.base_url)]
        return found + ([] if self.user_info is None else user_info_secrets(self.user_info))

    def redact(self, text: str) -> str:
        """``text`` without the key, the user info or the URL's query values (an endpoint may
        echo the key in an error, an HTTP stack's message may hold the URL)."""
        return redact_text(text, self._secrets)


def other_token_field(name: str) -> str:
    """The other name of the token limit (:data:`TOKEN_FIELDS`)."""
    return TOKEN_FIELDS[1] if name == TOKEN_FIELDS[0] else TOKEN_FIELDS[0]


def resolve_model(model: str, *, base_url: str | None) -> str:
    """The model name to send, from a v1-style name.

    ``openai/NAME`` is sent as ``NAME``. Any other ``provider/NAME`` (LiteLLM's form) is sent
    as given to a ``--base-url`` endpoint (a LiteLLM proxy routes such names; vLLM serves models
    named ``org/model``); without one it is a ConfigurationError: OpenAI serves no such name,
    and the kit calls OpenAI-compatible endpoints only.
    """
    name = model.strip()
    if not name:
        raise ConfigurationError("--model is empty; pass a model name, e.g. --model gpt-5-mini")
    name = name.removeprefix("openai/")
    if "/" in name and base_url is None:
        provider = name.split("/", 1)[0]
        raise ConfigurationError(
            f"model {model!r} names the provider {provider!r}, which is not OpenAI: the kit "
            "calls OpenAI-compatible endpoints only. Run one for it (a LiteLLM proxy, or the "
            "provider's own OpenAI-compatible URL) and pass --base-url URL with the model name "
            "that endpoint expects"
        )
    return name


def resolve_endpoint(
    *,
    model: str,
    base_url: str | None,
    api_key: str | None,
    environ: dict[str, str],
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
) -> Endpoint:
    """The endpoint of a run: ``base_url`` or OpenAI's, the key from ``api_key`` or
    ``OPENAI_API_KEY``. Raises ConfigurationError (a bad URL, no key for OpenAI itself)."""
    name = resolve_model(model, base_url=base_url)
    given = (base_url or OPENAI_BASE_URL).strip()
    url, user_info = split_credentials(given)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - urlsplit checks the port only when it is read
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(
            f"--base-url {redact_url(given)!r} is not an http(s) URL; give the API's base, e.g. "
            "http://localhost:8000/v1 (vLLM), http://localhost:11434/v1 (Ollama)"
        )
    url = urlunsplit(parts._replace(path=parts.path.rstrip("/"), fragment=""))
    if user_info is not None and api_key:
        raise ConfigurationError(
            "--base-url holds credentials (the user info before '@', sent as HTTP Basic auth) "
            "and an API key is given too (--api-key or --api-key-file, sent as a Bearer token): "
            "a request has one Authorization header. Pass one of them"
        )
    # Credentials in the URL are the ones meant for it: OPENAI_API_KEY is not sent along.
    key = api_key or (None if user_info is not None else environ.get("OPENAI_API_KEY")) or None
    if key is None and base_url is None:
        raise ConfigurationError(
            "no API key for OpenAI: set OPENAI_API_KEY or pass --api-key-file or --api-key (an "
            "endpoint of your own that needs none: pass --base-url)"
        )
    if not timeout > 0:
        raise ConfigurationError("--timeout must be positive")
    return Endpoint(base_url=url, model=name, api_key=key, timeout=timeout, user_info=user_info)


def read_key_file(path: str, *, flag: str = "--api-key-file") -> str:
    """The key on the first line of the file ``path``, stripped (a UTF-8 BOM too).

    Raises ConfigurationError naming ``flag`` and the path when the file is missing, cannot be
    read, is not UTF-8 text, or its first line is empty or longer than :data:`MAX_KEY_LINE`;
    the message never holds what the file holds.
    """
    where = f"{flag} {path}"
    try:
        with Path(path).open(encoding="utf-8-sig") as file:
            line = file.readline(MAX_KEY_LINE + 1)
    except FileNotFoundError:
        raise ConfigurationError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise ConfigurationError(f"{where}: a folder, not a file") from None
    except UnicodeDecodeError:
        raise ConfigurationError(
            f"{where}: not UTF-8 text; put the key on its first line"
        ) from None
    except OSError as exc:
        raise ConfigurationError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    if len(line) > MAX_KEY_LINE:
        raise ConfigurationError(
            f"{where}: its first line is longer than {MAX_KEY_LINE} characters; put the key "
            "alone on the first line"
        )
    key = line.strip()
    if not key:
        raise ConfigurationError(f"{where}: its first line is empty; put the key on it")
    return key


def map_chat_body(
    body: dict[str, Any],
    *,
    model: str,
    tools: list[dict[str, Any]],
    completion_params: dict[str, Any],
    limit_field: str,
) -> dict[str, Any]:
    """The OpenAI chat body for one of the kit's (see the module's docstring)."""
    out: dict[str, Any] = {"model": model}
    for key, value in body.items():
        if key in DROPPED:
            continue
        if key in KIT_FILLERS and value == KIT_FILLERS[key] and key not in completion_params:
            continue
        out[key] = value
    if "max_tokens" in out and limit_field != "max_tokens":
        out[limit_field] = out.pop("max_tokens")
    if tools and "tools" not in out:
        out["tools"] = tools
    return out
