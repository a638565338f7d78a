"""What counts as a credential, for refusing one where settings would store or log it.

Settings hold names, never secrets: they are recorded in ``metadata.json``, sent as a
server run's context, and logged by HTTP clients (a base URL). A key pasted into a base
URL, into ``model_kwargs`` or where a variable name belongs is refused, and messages name
the place that holds it, never its value. The tests err towards secrecy: a false positive
costs only a refusal naming what to do instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlsplit

KEY_PREFIXES = ("sk-", "sk_", "pk-", "rk-", "hf_", "gsk_", "xai-", "aiza", "ghp_", "glpat-")
"""Prefixes of common API keys (compared lower-case)."""

SECRET_NAME = re.compile(
    r"(key|api[-_]?key|apikey|authorization|auth|bearer|token|access[-_]?token|secret|"
    r"password|passwd|cookie|credentials?|x[-_]api[-_]key|sig(nature)?|session)",
    re.IGNORECASE,
)
"""A mapping key or URL parameter named like a credential (matched in full)."""


def looks_like_key(value: str) -> bool:
    """True for text that may be an API key: a known prefix, or a long random-looking token
    (keys are long runs of mixed letters and digits; variable names are words and ``_``)."""
    text = value.strip()
    if text.lower().startswith(KEY_PREFIXES):
        return True
    if text.startswith("Bearer "):
        return True
    token = re.fullmatch(r"[A-Za-z0-9_\-.]{20,}", text)
    if token is None:
        return False
    has_digit = any(c.isdigit() for c in text)
    mixed_case = any(c.islower() for c in text) and any(c.isupper() for c in text)
    longest_word = max((len(w) for w in re.split(r"[_\-.]", text)), default=0)
    return has_digit and (mixed_case or longest_word >= 16)


def secret_paths(value: Any, where: str = "") -> Iterator[str]:
    """Dotted paths in ``value`` whose key is named like a credential or whose text is one."""
    if isinstance(value, Mapping):
        for key, inner in value.items():
            path = f"{where}.{key}" if where else str(key)
            if is_secret_name(str(key)):
                yield path
            else:
                yield from secret_paths(inner, path)
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from secret_paths(inner, f"{where}[{i}]")
    elif isinstance(value, str) and looks_like_key(value):
        yield where or "(value)"


def is_secret_name(key: str) -> bool:
    """A field or parameter named like a credential (``api_key``, ``X-Api-Key``,
    ``Authorization``, ``access_token``…), but not ``max_tokens`` or ``author``."""
    words = [w for w in re.split(r"[-_.\s]", key.lower()) if w]
    joined = "".join(words)
    return bool(
        SECRET_NAME.fullmatch(key.strip())
        or joined.endswith(("apikey", "secret", "password", "token"))
        or (words and words[0] in ("auth", "authorization", "bearer", "cookie"))
    )


def url_credential(url: str) -> str | None:
    """Where ``url`` carries a credential (``user:key@``, a query parameter, a fragment, a
    key-like path segment), said without its value; None when it carries none."""
    parts = urlsplit(url)
    if "@" in parts.netloc:
        return "user:key@host"
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if is_secret_name(name) or looks_like_key(value):
            return f"query parameter {name!r}" if not looks_like_key(name) else "a query parameter"
    if parts.fragment:
        return "a fragment (the part after '#')"
    if any(looks_like_key(segment) for segment in parts.path.split("/")):
        return "a path segment that looks like a key"
    return None
