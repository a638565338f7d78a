"""``usage.jsonl``, the usage ledger: one line per request sent and one per answer to it.

Every request writes a ``sent`` line before it goes out (so a request the server saw is
counted even when the process dies before the reply), then a ``usage`` line when its reply
arrives, a ``refused`` line for an HTTP error status (not billed), or a ``failed`` line
when no reply could be read. A ``sent`` line with neither is *unrecorded*: a provider may
bill it, so it carries an upper bound (``bound_usd``). Each line is one ``write`` to a file
opened ``O_APPEND``, which the kernel holds once the call returns, so a SIGKILL loses none;
reruns append, so totals span the run's sessions. A line cut short (a full disk writes part of
it, then fails) is skipped on reading, and never joins the next line: a write cut short raises,
and a writer finding the file ending inside a line (its own, or an earlier session's) starts on
a fresh line.

``UsageLedger`` is also the run's budget (``max_cost``): once spent reaches it, the drive
loop stops starting questions and ``decide`` stops the ones in flight at their next turn
(stop reason ``budget``). Spent counts known dollars, estimates of replies without usage and
the bound of every unrecorded request, so a budget never silently stops counting. What a request
costs is decided by its caller, ``services.usage``; this module keeps and sums the lines.
"""

from __future__ import annotations

import errno
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

TOKEN_FIELDS = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_tokens")
"""A ``usage`` line's token counts (each null when the reply did not report it)."""


class LedgerLine(BaseModel):
    """One line of the ledger; which fields it has depends on its ``event``."""

    model_config = ConfigDict(extra="allow")

    event: str
    """``sent``, ``usage``, ``refused`` or ``failed``."""
    t: float | None = None
    """When it was written (epoch seconds)."""
    id: str | None = None
    """The request's id, shared by its ``sent`` line and the line that answers it."""
    role: str | None = None
    """``model``, ``judge`` or ``embeddings``."""
    model: str | None = None
    """The model asked for, as the run names it (a variant's ``NAME@LABEL``)."""
    thread: str | None = None
    """The question thread the request was made for (None: embeddings, preflight)."""
    node: str | None = None
    """The graph node that made it (``generate_next`` is a look-ahead)."""
    bound_input_tokens: int | None = None
    """``sent``: input tokens it can be billed for at most (UTF-8 bytes of the prompt)."""
    bound_output_tokens: int | None = None
    """``sent``: output tokens it can be billed for at most."""
    bound_usd: float | None = None
    """``sent``: dollars it can cost at most (None without a price)."""
    priced_as: str | None = None
    """``usage``: the name the model was asked and priced as, when not ``model``."""
    served_model: str | None = None
    """``usage``: the model the provider says served the reply."""
    input_tokens: int | None = None
    cached_input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    provider_cost: float | None = None
    """``usage``: dollars the provider reported for the call."""
    cost_usd: float | None = None
    """``usage``: dollars of the reply (None: no price, or no usage reported)."""
    batch: str | bool | None = None
    """Through the batch API: the batch's id on ``sent``, ``true`` on ``usage`` (batch prices)."""
    estimated_input_tokens: int | None = None
    """``usage`` without reported usage: the input tokens estimated from above."""
    estimated_output_tokens: int | None = None
    estimated_cost_usd: float | None = None
    """The dollars of that estimate, which the per-question cap counts."""
    status: int | None = None
    """``refused`` or ``failed``: the HTTP status, when there was one."""

    @property
    def dollars_bound(self) -> float | None:
        """A ``usage`` line's dollars, or its estimate when the reply reported no usage."""
        return self.cost_usd if self.cost_usd is not None else self.estimated_cost_usd

    @property
    def without_usage(self) -> bool:
        """A ``usage`` line whose reply did not say how many tokens went in and out."""
        return self.input_tokens is None or self.output_tokens is None


def _add(total: Any, value: Any) -> Any:
    """A sum (of counts or dollars) that stays unknown once one part is."""
    if total is None or value is None:
        return None
    return total + value


class LedgerFigures(BaseModel):
    """Sums over ledger lines. A token count or ``dollars`` is None (unknown) once any reply
    lacked it, never a partial sum; so is ``dollars_bound``, the most that may have been
    billed, once a price or an old ledger's bound is missing."""

    model_config = ConfigDict(extra="allow")

    api_calls: int | None = None
    """Requests sent (``sent`` lines)."""
    replies: int | None = None
    """Requests whose reply was recorded (``usage`` lines)."""
    refused: int | None = None
    """Requests answered with an HTTP error status (not billed)."""
    unrecorded: int | None = None
    """Requests sent with neither a reply nor a refusal recorded (may be billed)."""
    without_usage: int | None = None
    """Replies that reported no token counts (their tokens and dollars are unknown)."""
    input_tokens: int | None = None
    cached_input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    tokens: int | None = None
    """Input plus output tokens (None when either is unknown)."""
    dollars: float | None = None
    unrecorded_bound_usd: float | None = None
    """Upper bound of the unrecorded requests' dollars."""
    dollars_bound: float | None = None
    provider_cost_calls: int | None = None
    """Replies that carried the provider's own cost."""


@dataclass(slots=True)
class Tally:
    """``LedgerFigures`` being counted: plain attributes, as a pydantic model's assignment
    costs a microsecond each and a summary makes about ten per ledger line per group."""

    api_calls: int | None = 0
    replies: int | None = 0
    refused: int | None = 0
    without_usage: int | None = 0
    input_tokens: int | None = 0
    cached_input_tokens: int | None = 0
    output_tokens: int | None = 0
    reasoning_tokens: int | None = 0
    dollars: float | None = 0.0
    dollars_bound: float | None = 0.0
    provider_cost_calls: int | None = 0

    def add(self, line: LedgerLine) -> None:
        """Count one line (``sent`` lines' bounds are added by ``figures``)."""
        if line.event == "sent":
            self.api_calls = _add(self.api_calls, 1)
            return
        if line.event == "refused":
            self.refused = _add(self.refused, 1)
            return
        if line.event != "usage":
            return
        self.replies = _add(self.replies, 1)
        self.without_usage = _add(self.without_usage, int(line.without_usage))
        for name in TOKEN_FIELDS:
            setattr(self, name, _add(getattr(self, name), getattr(line, name)))
        self.provider_cost_calls = _add(
            self.provider_cost_calls, int(line.provider_cost is not None)
        )
        self.dollars = _add(self.dollars, line.cost_usd)
        self.dollars_bound = _add(self.dollars_bound, line.dollars_bound)

    def figures(self, unrecorded: Sequence[LedgerLine | None]) -> LedgerFigures:
        """The figures counted, with the ``unrecorded`` requests (a None is an old
        ledger's request, which has no bound) and the tokens in all."""
        bound: float | None = 0.0
        for line in unrecorded:
            bound = _add(bound, None if line is None else line.bound_usd)
        inputs, outputs = self.input_tokens, self.output_tokens
        return LedgerFigures(
            api_calls=self.api_calls,
            replies=self.replies,
            refused=self.refused,
            unrecorded=max(0, (self.api_calls or 0) - (self.replies or 0) - (self.refused or 0)),
            without_usage=self.without_usage,
            input_tokens=inputs,
            cached_input_tokens=self.cached_input_tokens,
            output_tokens=outputs,
            reasoning_tokens=self.reasoning_tokens,
            tokens=None if inputs is None or outputs is None else inputs + outputs,
            dollars=self.dollars,
            unrecorded_bound_usd=bound,
            dollars_bound=_add(self.dollars_bound, bound),
            provider_cost_calls=self.provider_cost_calls,
        )


class LedgerSummary(LedgerFigures):
    """The run's totals as sent (``metadata.json``'s ``usage``), overall, by role and
    model, and for three parts of it."""

    speculative: LedgerFigures | None = None
    """The look-ahead generations (node ``generate_next``)."""
    preflight: LedgerFigures | None = None
    """The preflight's minimal requests (node ``preflight``)."""
    embeddings: LedgerFigures | None = None
    """The questions' embedding requests (the preflight's apart)."""
    by_role_model: dict[str, LedgerFigures] | None = None
    """Per ``role:model``."""
    unpriced_models: list[str] | None = None
    """Models without a price (the model that served, where the reply named one)."""
    without_usage_models: dict[str, int] | None = None
    """Models with replies that reported no usage, and how many."""
    served_models: dict[str, dict[str, int]] | None = None
    """Per ``role:asked model`` of the chat roles, replies by the model that served them."""


def read_ledger(path: Path) -> Iterator[LedgerLine]:
    """Every whole line of a ledger (a line cut by a crash is skipped)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    yield from ledger_lines(data)


def ledger_lines(data: bytes) -> Iterator[LedgerLine]:
    """The lines of a piece of a ledger (a line cut by a crash is skipped)."""
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            yield LedgerLine.model_validate_json(raw)
        except ValidationError:
            continue


def unrecorded_lines(lines: Sequence[LedgerLine]) -> list[LedgerLine | None]:
    """The ``sent`` lines that no reply or refusal answers; a ledger without ids gives a
    None for each (counted, with no bound)."""
    answered = {line.id for line in lines if line.event in ("usage", "refused")}
    sent = [line for line in lines if line.event == "sent"]
    with_id = [line for line in sent if line.id is not None]
    unanswered: list[LedgerLine | None] = [line for line in with_id if line.id not in answered]
    legacy = len(sent) - len(with_id)
    legacy_answered = sum(
        1 for line in lines if line.event in ("usage", "refused") and line.id is None
    )
    return unanswered + [None] * max(0, legacy - legacy_answered)


def summarise_ledger(path: Path) -> LedgerSummary:
    """The run's totals as sent (``LedgerSummary``)."""
    lines = list(read_ledger(path))
    overall = Tally()
    parts = {p: Tally() for p in ("generate_next", "preflight", "embeddings")}
    by_model: dict[str, Tally] = {}
    unpriced: set[str] = set()
    without_usage: dict[str, int] = {}
    served: dict[str, dict[str, int]] = {}
    for line in lines:
        overall.add(line)
        key = f"{line.role}:{line.model}"
        tally = by_model.get(key)
        if tally is None:
            tally = by_model[key] = Tally()
        tally.add(line)
        if (part := line.node or line.role or "") in parts:  # an embedding request has no node
            parts[part].add(line)
        if line.event != "usage":
            continue
        if line.role != "embeddings":
            name = str(line.served_model or "not reported")
            counts = served.setdefault(key, {})
            counts[name] = counts.get(name, 0) + 1
        if line.without_usage:
            model = str(line.model)
            without_usage[model] = without_usage.get(model, 0) + 1
        elif line.cost_usd is None:
            unpriced.add(str(line.served_model or line.priced_as or line.model))
    unrecorded = unrecorded_lines(lines)
    settled = {
        name: part.figures([u for u in unrecorded if u is not None and (u.node or u.role) == name])
        for name, part in parts.items()
    }
    return LedgerSummary(
        **overall.figures(unrecorded).model_dump(),
        speculative=settled["generate_next"],
        preflight=settled["preflight"],
        embeddings=settled["embeddings"],
        by_role_model={
            key: figures.figures(
                [u for u in unrecorded if u is not None and f"{u.role}:{u.model}" == key]
            )
            for key, figures in sorted(by_model.items())
        },
        unpriced_models=sorted(unpriced),
        without_usage_models=dict(sorted(without_usage.items())),
        served_models={key: dict(sorted(c.items())) for key, c in sorted(served.items())},
    )


def ends_cut(fd: int) -> bool:
    """Whether the file ``fd`` reads ends inside a line (not empty, no final newline)."""
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data``: a write the disk cut short is followed by one for the rest,
    which raises the disk's error (``os.write`` alone would return the shorter count)."""
    while data:
        written = os.write(fd, data)
        if not written:
            raise OSError(errno.EIO, "the usage ledger took no byte of a write")
        data = data[written:]


class UsageBook(Protocol):
    """What records a run's requests and keeps its budget: a ``UsageLedger``, or the
    ``record.recorder.Recorder`` that owns one."""

    @property
    def exhausted(self) -> bool: ...

    def write(self, line: Mapping[str, Any]) -> None: ...

    def sent(
        self,
        role: str,
        model: str,
        where: Mapping[str, Any],
        *,
        input_tokens: int | None,
        output_tokens: int,
        bound_usd: float | None,
    ) -> str: ...

    def failed(self, role: str, model: str, request: str, status: int | None) -> None: ...

    def follow(self) -> None: ...

    def catch_up(self) -> None: ...

    @property
    def max_cost(self) -> float | None: ...

    @property
    def path(self) -> Path: ...


@dataclass
class UsageLedger:
    """The append-only usage file of one run directory (thread-safe), and the run's budget."""

    path: Path
    max_cost: float | None = None
    """Dollars after which the run stops (None: no cap)."""
    spent: float = 0.0
    """Dollars spent so far, by every session (module docstring)."""
    _fd: int | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _in_flight: dict[str, float] = field(default_factory=dict)
    _read_to: int = 0
    """Bytes of the file read so far (``catch_up`` reads on from there)."""
    _mine: set[str] | None = None
    """While following (``follow``), the requests this process sent whose answering line
    ``catch_up`` has not read yet."""
    _cut: bool = False
    """The file ends inside a line (module docstring): the next write starts a new one."""

    def __post_init__(self) -> None:
        for line in ledger_lines(self._read_from(0)):
            self._count_line(line)
        self.spent += sum(self._in_flight.values())  # earlier sessions' unrecorded requests
        self._in_flight.clear()

    def _read_from(self, offset: int) -> bytes:
        """The file's whole lines from ``offset`` on; ``_read_to`` moves past them."""
        try:
            with self.path.open("rb") as file:
                file.seek(offset)
                data = file.read()
        except FileNotFoundError:
            return b""
        whole = data[: data.rfind(b"\n") + 1]
        self._read_to = offset + len(whole)
        return whole

    def follow(self) -> None:
        """From now on, ``catch_up`` counts what other processes of the session append
        (``runner.workers``), so each keeps the run-wide budget. Call it before the others
        start writing: everything in the file now is counted already."""
        with self._lock:
            if self._mine is None:
                self._mine = set()
                self._read_from(self._read_to)

    def catch_up(self) -> None:
        """Count what other processes appended since the last look (``follow``)."""
        with self._lock:
            if self._mine is None:
                return
            for line in ledger_lines(self._read_from(self._read_to)):
                request = str(line.id)
                if request in self._mine:
                    if line.event != "sent":
                        self._mine.discard(request)
                    continue
                self._count_line(line)

    @property
    def exhausted(self) -> bool:
        """Whether the run's budget is spent."""
        return self.max_cost is not None and self.spent >= self.max_cost

    def write(self, line: Mapping[str, Any]) -> None:
        """Append one line, stamped with the time (module docstring).

        ``line`` is written as given, not validated as a ``LedgerLine``: every line comes
        from ``sent``, ``failed`` or ``services.usage.usage_line``, whose fields have the
        line's types already (``test_a_written_line_is_what_its_model_would_write``), and a
        validation and dump cost more than the rest of a request's bookkeeping."""
        event = line["event"]
        data = (json.dumps({"event": event, "t": round(time.time(), 3), **line}) + "\n").encode()
        request = str(line.get("id"))
        with self._lock:
            if self._fd is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
                self._cut = ends_cut(self._fd)
            if self._cut:
                data = b"\n" + data
            self._cut = True
            write_all(self._fd, data)
            self._cut = False
            cost = line.get("cost_usd")
            dollars = line.get("estimated_cost_usd") if cost is None else cost
            self._count(event, request, line.get("bound_usd"), dollars)
            if self._mine is not None and event == "sent":
                self._mine.add(request)

    def _count_line(self, line: LedgerLine) -> None:
        """``_count`` of a line read from the file."""
        self._count(line.event, str(line.id), line.bound_usd, line.dollars_bound)

    def _count(
        self, event: str, request: str, bound_usd: float | None, dollars: float | None
    ) -> None:
        """Keep ``spent`` current with a line of ``event`` answering ``request`` (called under
        the lock): ``bound_usd`` is a ``sent`` line's, ``dollars`` a ``usage`` line's known or
        estimated dollars."""
        if event == "sent":
            self._in_flight[request] = bound_usd or 0.0
        elif event == "usage":
            self._in_flight.pop(request, None)
            self.spent += dollars or 0.0
        elif event == "refused":
            self._in_flight.pop(request, None)
        elif event == "failed":  # no reply: it may have been billed, at most its bound
            self.spent += self._in_flight.pop(request, 0.0)

    def sent(
        self,
        role: str,
        model: str,
        where: Mapping[str, Any],
        *,
        input_tokens: int | None,
        output_tokens: int,
        bound_usd: float | None,
    ) -> str:
        """A request is about to go out, billable at most ``bound_usd``; its id, for the line
        that answers it."""
        request = uuid.uuid4().hex[:16]
        self.write(
            {
                "event": "sent",
                "id": request,
                "role": role,
                "model": model,
                **where,
                "bound_input_tokens": input_tokens,
                "bound_output_tokens": output_tokens,
                "bound_usd": bound_usd,
            }
        )
        return request

    def failed(self, role: str, model: str, request: str, status: int | None) -> None:
        """A request ended without a usable reply: ``refused`` with an HTTP error status
        (not billed), else ``failed`` (counted at its bound)."""
        refused = status is not None and status >= 400
        event = "refused" if refused else "failed"
        self.write({"event": event, "id": request, "role": role, "model": model, "status": status})

    def close(self) -> None:
        """Close the file (a later write opens it again)."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
