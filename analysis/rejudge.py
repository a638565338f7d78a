"""Recorded answers judged again by another judge: what ``calibrate --judge-model`` and
``rescore --judge-model`` ask.

Each answer is judged ``judge_samples`` times with the ``judge`` node's exact coherence prompt;
the first judgment decides, as in a run (``nodes.judge_calls.sample_judgments``), the others
measure noise. Judgments are cached by (judge, endpoint, temperature) and prompt, with the
model that served each, so a rerun or another command on the same answers asks nothing again.

Direct calls go through ``Services.chat`` (adaptive limit, the one retry layer, unreadable
replies asked again, every request in the ledger). With ``batch`` they go through the provider's
batch API (``services.batch``): one batch for everything missing, then one for unreadable
replies, up to ``judge_attempts``, at batch prices. Where an output file repeats an id, its
first readable reply counts: a later refusal never discards it. An answer whose judgments could
not all be had is a failure, never a score: the caller reports it, and a rerun asks only for it.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aidanbench.core.errors import EndpointRefused, ScoreParseError, UsageError
from aidanbench.core.settings import Settings
from aidanbench.nodes.judge_calls import neutralise, read_judge
from aidanbench.nodes.parsing import parse_score
from aidanbench.nodes.prompts import render_coherence
from aidanbench.record.usage import UsageBook, summarise_ledger
from aidanbench.services import ServicesFactory, judge_namespace, key_values
from aidanbench.services.batch import BatchClient, BatchRequest, BatchStatus, NoBatchApi
from aidanbench.services.cache import digest
from aidanbench.services.chat import chat_body
from aidanbench.services.errors import describe, is_recoverable, is_retryable, redact
from aidanbench.services.limits import EndpointLimiter
from aidanbench.services.pricing import price_table
from aidanbench.services.usage import (
    OUTPUT_TOKENS_BOUND,
    reply_text,
    reply_usage,
    served_model,
    usage_line,
)

TAG = "coherence_score"
"""The score tag of the coherence prompt."""

Progress = Callable[[str], None]
"""Where progress lines go (one line each; the command prints them to stderr)."""


def coherence_prompt(question: str, answer: str) -> str:
    """The coherence prompt the ``judge`` node sends for ``answer``, byte for byte."""
    return render_coherence(question, neutralise(answer)[0])


@dataclass(frozen=True)
class Judged:
    """Every judgment of one answer, in the order asked: the deciding one first."""

    scores: tuple[int, ...]
    served: tuple[str | None, ...]
    """The model the provider said served each judgment (None: not named)."""

    @property
    def score(self) -> int:
        """The judgment that decides (the first)."""
        return self.scores[0]


@dataclass
class Rejudging:
    """What judging a set of prompts gave."""

    answers: int = 0
    """Distinct answers (prompts) judged: a repeated answer is one prompt, judged once."""
    judgments: dict[str, Judged] = field(default_factory=dict)
    """By prompt, for every prompt whose judgments could all be had."""
    failures: dict[str, str] = field(default_factory=dict)
    """By prompt: why its judgments could not be had (an error of the endpoint)."""
    refused: dict[str, str] = field(default_factory=dict)
    """By prompt: the last reply of a judge that gave no readable score in ``judge_attempts``
    tries; the answer stays undecided, never a score."""
    unreadable: dict[str, int] = field(default_factory=dict)
    """Replies that held no readable score (each asked again), by ``CallStats.unreadable``."""
    requests: int = 0
    """Judge requests this command made (batch lines included)."""
    from_cache: int = 0
    """Prompts answered entirely from the cache."""
    batches: list[str] = field(default_factory=list)
    """Ids of the batches used (created or resumed)."""

    def count_unreadable(self, found: Mapping[str, int] | None) -> None:
        """Add a judgment's unreadable replies (``CallStats.unreadable``)."""
        for why, count in (found or {}).items():
            self.unreadable[why] = self.unreadable.get(why, 0) + count

    def figures(self) -> dict[str, Any]:
        """What the judging did, as both commands' JSON and the run's provenance give it."""
        return {
            "requests": self.requests,
            "from_cache": self.from_cache,
            "batches": self.batches,
            "unreadable": self.unreadable,
            "refused": len(self.refused),
        }

    def served_counts(self) -> dict[str, int]:
        """Judgments by the model that served them ("not reported" when unnamed)."""
        served = (name for judged in self.judgments.values() for name in judged.served)
        return dict(sorted(Counter(name or "not reported" for name in served).items()))


class JudgeAborted(Exception):
    """A failure no retry can fix (a bad key, a model that does not exist): every other
    request would meet it too, so judging stops at once."""


Judgment = tuple[int, str | None]
"""One judgment: the score and the model that served it."""


def _judged(judgments: Sequence[Judgment]) -> Judged:
    """The judgments in the order they were asked, the deciding one first."""
    return Judged(tuple(s for s, _ in judgments), tuple(n for _, n in judgments))


@dataclass
class _Job:
    settings: Settings
    factory: ServicesFactory
    progress: Progress | None
    ledger: UsageBook
    result: Rejudging
    done: int = 0
    limiter: EndpointLimiter | None = None
    """The judge endpoint's limiter, while judgments are asked directly: every attempt takes
    one of its slots (``services.retry``), so its count is the requests sent."""
    _counted: int = 0
    """The limiter's attempts when this judging began."""
    _shown: float = 0.0

    def asking(self, limiter: EndpointLimiter) -> None:
        """Count the requests sent through ``limiter`` from now on."""
        self.limiter, self._counted = limiter, limiter.requests

    def asked(self) -> None:
        """The direct requests are over: add them to the result's."""
        if self.limiter is not None:
            self.result.requests += self.limiter.requests - self._counted
            self.limiter = None

    def tick(self, force: bool = False) -> None:
        if self.progress is None:
            return
        now = time.monotonic()
        if force or now - self._shown >= 2.0:
            self._shown = now
            r, limiter = self.result, self.limiter
            sent = r.requests
            endpoint = ""
            if limiter is not None:
                stats = limiter.stats()
                sent += stats.requests - self._counted
                endpoint = (
                    f"; {self.settings.endpoint('judge').host}: {stats.in_flight} in flight of "
                    f"{stats.limit} allowed, {limiter.queued} waiting for a slot, "
                    f"{stats.rate_limited} rate-limited"
                )
            self.progress(
                f"judged {self.done}/{r.answers} distinct answers with "
                f"{self.settings.judge_model} "
                f"({r.from_cache} from the cache, {sent} requests sent, "
                f"{len(r.failures)} failed{endpoint})"
            )


async def rejudge(
    prompts: Sequence[str],
    settings: Settings,
    ledger: UsageBook,
    *,
    batch_poll_seconds: float | None = None,
    progress: Progress | None = None,
    batch_progress: Callable[[BatchStatus], None] | None = None,
) -> Rejudging:
    """``settings.judge_samples`` judgments of each distinct prompt, from the cache, else asked
    (by batch when ``batch_poll_seconds`` is given). Raises ``JudgeAborted`` (see there)."""
    from aidanbench.services import OpenAIServices, clients

    async with OpenAIServices(
        clients.RUN_TRANSPORT, chat=clients.RUN_CHAT, ledger=ledger
    ) as factory:
        unique = list(dict.fromkeys(prompts))
        job = _Job(settings, factory, progress, ledger, Rejudging(len(unique)))
        namespace = judge_namespace(settings)
        wanted = settings.judge_samples
        missing: dict[str, list[Judgment]] = {}
        for prompt in unique:
            have = factory(settings).cache.judgments(namespace, prompt)[:wanted]
            if len(have) == wanted:
                job.result.judgments[prompt] = _judged(have)
                job.result.from_cache += 1
                job.done += 1
            else:
                missing[prompt] = have
        job.tick(force=True)
        if missing and batch_poll_seconds is not None:
            await _batched(job, missing, batch_poll_seconds, batch_progress)
        elif missing:
            await _direct(job, missing)
        job.tick(force=True)
        return job.result


def _store(job: _Job, prompt: str, judgments: list[Judgment]) -> None:
    """Cache the judgments as they came (the deciding one first), so a later command
    asking for fewer takes the first ones, not the smallest of sorted ones."""
    services = job.factory(job.settings)
    services.cache.put_judgments(judge_namespace(job.settings), prompt, judgments)
    job.result.judgments[prompt] = _judged(judgments)


async def _direct(job: _Job, missing: dict[str, list[Judgment]]) -> None:
    settings = job.settings
    services = job.factory(settings)
    table = price_table(settings.prices_path)

    async def once(prompt: str) -> Judgment:
        try:
            score, call = await read_judge(
                lambda: services.chat("judge", prompt),
                prompt,
                TAG,
                settings.judge_attempts,
                lambda served: table.served_price(settings.judge_model, served),
            )
        except ScoreParseError as exc:
            job.result.count_unreadable((exc.calls or {}).get("unreadable"))
            raise
        job.result.count_unreadable(call.get("unreadable"))
        return score, call["served_model"]

    async def judge(prompt: str, have: list[Judgment]) -> None:
        try:
            if not have:
                have = [await once(prompt)]
            more = await asyncio.gather(
                *(once(prompt) for _ in range(settings.judge_samples - len(have)))
            )
            _store(job, prompt, [*have, *more])
        except Exception as exc:
            if not is_recoverable(exc):
                raise
            host = settings.endpoint("judge").host
            message = describe("judge", host, exc, key_values(settings))
            if isinstance(exc, ScoreParseError):
                job.result.refused[prompt] = message["message"]
            elif not is_retryable(exc):
                raise JudgeAborted(message["message"]) from exc
            else:
                job.result.failures[prompt] = message["message"]
        job.done += 1
        job.tick()

    job.asking(services.limiters["judge"])
    tasks = [asyncio.ensure_future(judge(p, have)) for p, have in missing.items()]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    finally:
        job.asked()


def _custom_id(prompt: str, sample: int) -> str:
    return f"{digest(prompt).hex()[:32]}-{sample}"


async def _batched(
    job: _Job,
    missing: dict[str, list[Judgment]],
    poll_seconds: float,
    batch_progress: Callable[[BatchStatus], None] | None,
) -> None:
    from aidanbench.services.clients import api_key, openai_client

    settings = job.settings
    services = job.factory(settings)
    model = settings.judge_model
    table = price_table(settings.prices_path)
    judge = settings.endpoint("judge")
    client = openai_client(judge.base_url, api_key(judge.key_env, "judge"), settings, None)
    runner = BatchClient(
        client,
        services.cache,
        services.limiters["judge"],
        settings.request_timeout,
        settings.max_retries,
        poll_seconds,
        batch_progress,
    )
    wanted: dict[str, tuple[str, int]] = {}
    for prompt, have in missing.items():
        for sample in range(len(have), settings.judge_samples):
            wanted[_custom_id(prompt, sample)] = (prompt, sample)
    got: dict[tuple[str, int], Judgment] = {}
    errors: dict[str, str] = {}
    unread: set[str] = set()
    """Requests whose last reply held no readable score."""
    try:
        for _ in range(settings.judge_attempts):
            ids = sorted(wanted)
            requests = [
                BatchRequest(
                    custom_id,
                    chat_body(model, wanted[custom_id][0], settings.judge_temperature),
                )
                for custom_id in ids
            ]

            def created(batch_id: str, count: int = len(requests)) -> None:
                job.result.requests += count
                where = {"thread": None, "node": None, "batch": batch_id}
                for _ in range(count):
                    job.ledger.sent(
                        "judge",
                        model,
                        where,
                        input_tokens=None,
                        output_tokens=OUTPUT_TOKENS_BOUND,
                        bound_usd=None,
                    )

            batch_id, results = await runner.run(requests, on_created=created)
            job.result.batches.append(batch_id)
            where: dict[str, Any] = {"thread": None, "node": None, "batch": batch_id}
            for custom_id, answer in ((i, a) for i in ids for a in results[i]):
                if answer.message is None:
                    if custom_id in wanted:
                        errors[custom_id] = answer.error or "no reply"
                    continue
                served = served_model(answer.message)
                price = table.served_price(model, served)
                batch_price = None if price is None else price.batch()
                usage = reply_usage(answer.message)
                job.ledger.write(
                    usage_line("judge", model, usage, batch_price, where, served=served, batch=True)
                )
                if custom_id not in wanted:
                    continue
                try:
                    score = parse_score(reply_text(answer.message), TAG)
                except ScoreParseError as exc:
                    errors[custom_id] = _one_line(exc)
                    unread.add(custom_id)
                    job.result.count_unreadable({exc.reason: 1})
                    continue
                got[wanted.pop(custom_id)] = (score, served)
                errors.pop(custom_id, None)
                unread.discard(custom_id)
            if not wanted:
                break
    finally:
        await client.close()
    for prompt, have in missing.items():
        judged = [*have]
        for sample in range(len(have), settings.judge_samples):
            found = got.get((prompt, sample))
            if found is None:
                judged = []
                custom_id = _custom_id(prompt, sample)
                error = redact(errors.get(custom_id, "no reply"), key_values(settings))
                (job.result.refused if custom_id in unread else job.result.failures)[prompt] = error
                break
            judged.append(found)
        if judged:
            _store(job, prompt, judged)
        job.done += 1


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


LEDGER_SUFFIX = ".usage.jsonl"
"""The usage ledger's name: the judgment cache's, with this in place of its suffix."""


def ledger_path(cache: Path) -> Path:
    """The usage ledger kept beside a judgment cache."""
    return cache.with_name(cache.stem + LEDGER_SUFFIX)


class Unjudged(Exception):
    """Answers could not be judged (the others are cached): the command's last line."""

    def __init__(self, judged: Rejudging) -> None:
        first = next(iter(judged.failures.values()))
        super().__init__(
            f"{len(judged.failures)} of {judged.answers} answers could not be judged "
            f"(first: {first}); "
            "the others are cached: run the same command again to ask only for these"
        )


def judge_all(
    prompts: Sequence[str], settings: Settings, ledger: UsageBook, **options: Any
) -> Rejudging:
    """``rejudge`` run to its end; a failure no retry can fix is one ``UsageError`` line."""
    try:
        return asyncio.run(rejudge(prompts, settings, ledger, **options))
    except JudgeAborted as exc:
        raise UsageError(f"the judge {settings.judge_model} cannot be used: {exc}") from None
    except EndpointRefused as exc:
        raise UsageError(f"the judge {settings.judge_model} cannot be used: {exc.reason}") from None
    except NoBatchApi as exc:
        raise UsageError(
            f"{settings.endpoint('judge').base_url} has no Batch API ({exc} answered 404): "
            "nothing was spent; without --batch the judge is asked directly"
        ) from None


def cost_summary(ledger: UsageBook) -> dict[str, Any]:
    """What the judging's ledger records: requests, tokens, dollars, models served."""
    usage = summarise_ledger(ledger.path)
    return {
        "ledger": str(ledger.path),
        "api_calls": usage.api_calls,
        "tokens": usage.tokens,
        "dollars": usage.dollars,
        "unpriced_models": usage.unpriced_models or [],
        "served_models": usage.served_models or {},
    }
