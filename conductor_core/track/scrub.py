"""Secret scrubbing for everything that leaves the process for MLflow (params, tables, traces).

Three rules, applied together:

- a key whose name looks like a secret (``api_key``, ``token``, ``password``, ``authorization``,
  ``aws_secret_access_key``, ...) is dropped; a key ending in ``_env`` names an environment
  variable and is kept (``api_key_env: OPENAI_API_KEY`` is a name, not a key);
- a value equal to the value of an environment variable that holds a secret (one named by an
  ``*_env`` field of the config, or one whose own name looks like a secret) is replaced by
  ``"***"``;
- a value that looks like a credential (``sk-...``, ``AKIA...``, ``ghp_...``, ``hf_...``, a JWT,
  ``Bearer ...``) is replaced by ``"***"``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "***"
"""What a scrubbed value becomes."""

_SECRET_WORDS = frozenset(
    {
        "secret",
        "secrets",
        "password",
        "passwd",
        "passphrase",
        "authorization",
        "apikey",
        "credential",
        "credentials",
        "cookie",
        "bearer",
    }
)
"""Words that make any key a secret wherever they appear in it."""

_SECRET_ENDINGS = (
    ("api", "key"),
    ("access", "key"),
    ("secret", "key"),
    ("private", "key"),
    ("signing", "key"),
    ("token",),
    ("pwd",),
    ("auth",),
)
"""Word sequences that make a key a secret when the key ends with them."""

_SECRET_INNER = (("api", "key"), ("access", "key"), ("private", "key"), ("secret", "access"))
"""Word sequences that make a key a secret wherever they appear (``AWS_ACCESS_KEY_ID``)."""

_NAME_SUFFIXES = (("env",), ("env", "var"), ("env", "name"))
"""Key endings that mark the value as the NAME of an environment variable (kept)."""

_KEY_PATTERNS = re.compile(
    r"""
    sk-[A-Za-z0-9_\-]{16,}                      # OpenAI / Anthropic style (sk-..., sk-ant-...)
    | (?:AKIA|ASIA)[0-9A-Z]{16}                 # AWS access key ids
    | gh[pousr]_[A-Za-z0-9]{30,}                # GitHub tokens
    | hf_[A-Za-z0-9]{30,}                       # Hugging Face tokens
    | AIza[0-9A-Za-z_\-]{35}                    # Google API keys
    | xox[abprs]-[A-Za-z0-9\-]{10,}             # Slack tokens
    | eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*   # JWTs
    | (?i:bearer)\s+[A-Za-z0-9_\-.=+/]{16,}      # Authorization header values
    """,
    re.VERBOSE,
)

MIN_SECRET_LEN = 6
"""Environment values shorter than this are not treated as secrets (too many false hits)."""


def _words(key: str) -> tuple[str, ...]:
    return tuple(w for w in re.split(r"[^a-z0-9]+", key.lower()) if w)


def _ends_with(words: tuple[str, ...], tail: tuple[str, ...]) -> bool:
    return len(words) >= len(tail) and words[-len(tail) :] == tail


def _contains(words: tuple[str, ...], seq: tuple[str, ...]) -> bool:
    n = len(seq)
    return any(words[i : i + n] == seq for i in range(len(words) - n + 1))


def is_name_key(key: str) -> bool:
    """True for a key that holds the NAME of an environment variable (``api_key_env``)."""
    words = _words(key)
    return any(_ends_with(words, tail) for tail in _NAME_SUFFIXES)


def is_secret_key(key: str) -> bool:
    """True when a key's name says its value is a secret (``api_key``, ``hf_token``, ...).

    Keys naming an environment variable (``*_env``) are not secrets. Counting words such as
    ``max_tokens`` or ``input_tokens`` are not secrets either (only a final ``token`` is).
    """
    if is_name_key(key):
        return False
    words = _words(key)
    if any(w in _SECRET_WORDS for w in words):
        return True
    if any(_ends_with(words, tail) for tail in _SECRET_ENDINGS):
        return True
    return any(_contains(words, seq) for seq in _SECRET_INNER)


def looks_like_secret(text: str) -> bool:
    """True when ``text`` contains something shaped like a credential (``sk-...``, ``AKIA...``)."""
    return bool(_KEY_PATTERNS.search(text))


def env_names_in(config: Any) -> set[str]:
    """Names of environment variables referenced by ``*_env`` fields anywhere in ``config``."""
    found: set[str] = set()
    if isinstance(config, Mapping):
        for key, value in config.items():
            if isinstance(value, str) and is_name_key(str(key)):
                found.add(value)
            else:
                found |= env_names_in(value)
    elif isinstance(config, list | tuple):
        for item in config:
            found |= env_names_in(item)
    return found


def secret_values(config: Any = None, environ: Mapping[str, str] | None = None) -> set[str]:
    """Values of environment variables that hold secrets.

    These are the variables named by ``*_env`` fields of ``config`` plus every variable whose own
    name looks like a secret (``OPENAI_API_KEY``, ``AWS_SECRET_ACCESS_KEY``, ``HF_TOKEN``, ...).
    Values shorter than :data:`MIN_SECRET_LEN` are ignored.
    """
    env = os.environ if environ is None else environ
    names = env_names_in(config) if config is not None else set()
    names |= {name for name in env if is_secret_key(name)}
    return {env[n] for n in names if len(env.get(n, "")) >= MIN_SECRET_LEN}


def scrub_value(value: str, secrets: Iterable[str] = ()) -> str:
    """``"***"`` when ``value`` holds a known secret or looks like a credential, else ``value``."""
    if any(s and s in value for s in secrets) or looks_like_secret(value):
        return REDACTED
    return value


def scrub_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every known secret and every credential-shaped substring replaced by ``***``.

    Unlike :func:`scrub_value`, the rest of the text is kept (for responses in traces).
    """
    for s in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(s, REDACTED)
    return _KEY_PATTERNS.sub(REDACTED, text)


def scrub_obj(obj: Any, secrets: Iterable[str] = ()) -> Any:
    """A copy of a JSON-like object with secret keys dropped and every string scrubbed."""
    secrets = tuple(secrets)
    if isinstance(obj, str):
        return scrub_text(obj, secrets)
    if isinstance(obj, Mapping):
        return {k: scrub_obj(v, secrets) for k, v in obj.items() if not is_secret_key(str(k))}
    if isinstance(obj, list | tuple):
        return [scrub_obj(v, secrets) for v in obj]
    return obj
