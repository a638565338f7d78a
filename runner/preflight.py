"""Checks before a run starts: can each endpoint be reached at all?

An unreachable endpoint (a typo in ``--base-url``, a local server that is not running)
would otherwise surface as every question stopping with a connection error after its
retries. One TCP connection per distinct host says so at once, in one line. It is skipped
when a proxy is configured, since then the clients do not connect directly.
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlsplit

from aidanbench.core.errors import UsageError
from aidanbench.core.settings import LOCAL_EMBEDDING_MODEL, Settings

PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy")
OPENAI_URL = "https://api.openai.com/v1"


def endpoints(settings: Settings) -> dict[str, str]:
    """Base URL of each role that talks HTTP (local embeddings do not)."""
    urls = {
        "model": settings.base_url or OPENAI_URL,
        "judge": settings.judge_base_url or OPENAI_URL,
    }
    if settings.embedding_model != LOCAL_EMBEDDING_MODEL:
        urls["embeddings"] = settings.embedding_base_url or OPENAI_URL
    return urls


def check_reachable(settings: Settings, timeout: float = 5.0) -> None:
    """Raise ``UsageError`` naming the first endpoint that refuses a TCP connection."""
    if any(os.environ.get(v) for v in PROXY_VARIABLES):
        return
    seen: set[tuple[str, int]] = set()
    for role, url in endpoints(settings).items():
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        if (host, port) in seen:
            continue
        seen.add((host, port))
        try:
            with socket.create_connection((host, port), timeout=timeout):
                pass
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise UsageError(
                f"cannot reach the {role} endpoint {host}:{port} ({reason}); "
                "check its base URL and that the server is running"
            ) from None
