"""Where a role given no base URL goes: ``OPENAI_BASE_URL`` when it is set, as the OpenAI
SDK reads it, else OpenAI."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aidanbench.core.settings import ROLE_FIELDS

BASE_URL_VARIABLE = "OPENAI_BASE_URL"
"""The OpenAI SDK's variable: the base URL of every client not given one."""


def environment_base_urls(
    fields: dict[str, Any], environ: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """``fields`` with ``OPENAI_BASE_URL`` as the base URL of every role given none, and
    which roles took it (role: the variable's name).

    Resolved at the edges (``run``, the seed's ``vf-eval``), so the URL a role uses is a
    setting the run records and messages name, never a fallback hidden in a client. Keys
    need nothing of the kind: every key variable defaults to ``OPENAI_API_KEY``.
    """
    url = environ.get(BASE_URL_VARIABLE, "").strip()
    if not url:
        return fields, {}
    resolved = dict(fields)
    sources: dict[str, str] = {}
    for role, names in ROLE_FIELDS.items():
        if resolved.get(names.base_url) is None:
            resolved[names.base_url] = url
            sources[role] = BASE_URL_VARIABLE
    return resolved, sources
