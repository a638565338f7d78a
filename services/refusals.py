"""Errors no retry can fix: the endpoint refuses the role, not one request.

A 404, 401 or 403 says the same for every request of a role: recording it as each question's
error would charge every question with a configuration mistake, and rerunning would only
repeat it. So it is raised as
``EndpointRefused``, out of the graph: the run stops at once with one line, and the interrupted
step stays pending, so a corrected rerun continues every thread where it stopped.

A 400 is usually about one request and stays that question's error, unless it is about the
role's settings (a request field the model does not take). Told apart by asking: the first 400
of a role with no success yet is followed by one content-free request with the same settings;
if that is refused too, ``EndpointRefused``, else the role's 400s are the requests' own from
then on. Concurrent 400s of one role share one such request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aidanbench.core.errors import EndpointRefused, printable
from aidanbench.core.settings import ROLE_NAMES, Settings, role_flag
from aidanbench.services.errors import api_message, redact, short, status_of

REFUSED_STATUSES = frozenset({401, 403, 404})
"""Statuses that refuse a role whatever the request."""

Probe = Callable[[], Awaitable[object]]
"""One content-free request of a role (raises what the endpoint answered)."""


@dataclass
class RefusalWatch:
    """Tells, for one settings object's roles, a refusal from a request's own error."""

    settings: Settings
    secrets: list[str] = field(default_factory=list)
    """Key values to keep out of messages."""
    answered: set[str] = field(default_factory=set)
    """Roles that have had a successful request."""
    _probes: dict[str, asyncio.Future[BaseException | None]] = field(default_factory=dict)

    def succeeded(self, role: str) -> None:
        """A request of ``role`` succeeded."""
        self.answered.add(role)

    async def check(self, role: str, exc: BaseException, probe: Probe) -> None:
        """Raise ``EndpointRefused`` when ``exc`` (retries done) means no request of ``role``
        can succeed."""
        status = status_of(exc)
        if status in REFUSED_STATUSES:
            raise self.refused(role, exc) from exc
        if status != 400 or role in self.answered:
            return
        probed = await self._probe(role, probe)
        if probed is not None and status_of(probed) in (400, *REFUSED_STATUSES):
            raise self.refused(role, exc, probed) from exc

    async def _probe(self, role: str, probe: Probe) -> BaseException | None:
        """The outcome of the role's content-free request (one in flight per role)."""
        running = self._probes.get(role)
        if running is None:
            running = self._probes[role] = asyncio.ensure_future(self._ask(role, probe))
            running.add_done_callback(lambda _: self._probes.pop(role, None))
        return await asyncio.shield(running)

    async def _ask(self, role: str, probe: Probe) -> BaseException | None:
        try:
            await probe()
        except Exception as exc:
            return exc
        self.answered.add(role)
        return None

    def refused(
        self, role: str, exc: BaseException, probed: BaseException | None = None
    ) -> EndpointRefused:
        """The error that stops the run, with its one line."""
        reason = self.reason(role, exc, probed)
        return EndpointRefused(
            f"{reason}. No retry can fix this, so the run stopped at once and no question "
            "was charged an error; run the same command again once fixed: every question "
            "continues where it stopped",
            reason,
        )

    def reason(self, role: str, exc: BaseException, probed: BaseException | None = None) -> str:
        """Who refused what, and what to change."""
        import openai

        endpoint = self.settings.endpoint(role)
        model, host, key_env = endpoint.model, endpoint.host, endpoint.key_env
        status = status_of(exc)
        code = getattr(exc, "code", None)
        said = f"HTTP {status}" + (f" {code}" if code else "")
        if isinstance(exc, openai.APIStatusError) and api_message(exc):
            said += f": {short(api_message(exc), 200)}"
        said = printable(redact(said, self.secrets))
        who = f"the {ROLE_NAMES[role]} endpoint {host}"
        if status in (401, 403):
            what = (
                f"{who} refused the key in {key_env} ({said}); put a valid key in {key_env} "
                f"or name another variable with {role_flag(role, 'api_key_env')}"
            )
        elif status == 404:
            what = (
                f"{who} does not serve {printable(model)} ({said}); fix "
                f"{role_flag(role, 'model')} or {role_flag(role, 'base_url')}"
            )
        else:
            also = f"HTTP {status_of(probed)}" if probed is not None else "the same"
            what = (
                f"{who} refuses every request of {printable(model)} ({said}; a one-line "
                f"request with the same settings got {also} too); fix the role's settings "
                f"({_settings_flags(role)})"
            )
        return what


def _settings_flags(role: str) -> str:
    if role == "model":
        return "--model, --model-kwargs"
    if role == "judge":
        return "--judge-model, --judge-temperature"
    return "--embedding-model"
