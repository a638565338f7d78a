"""Run settings: the graphs' ``context_schema``.

One frozen, documented model so LangGraph Studio renders it as a form and a run can be
reproduced from it. It holds names, never secrets: each role names the environment variable
its API key is read from, and clients are built from these settings outside the graph.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from aidanbench.core.credentials import secret_paths, url_credential
from aidanbench.core.errors import install_hint
from aidanbench.core.scores import (
    COHERENCE_THRESHOLD,
    LEXICAL_NOVELTY_THRESHOLD,
    NOVELTY_THRESHOLD,
    declared,
)
from aidanbench.core.thresholds import Thresholds

REFERENCE_JUDGE = "o1-mini"
"""The published benchmark's judge, the default one: the coherence threshold is on its scale."""

REFERENCE_EMBEDDING_MODEL = "text-embedding-3-large"
"""The published benchmark's embedding model, the default one: novelty is cut on its cosines."""

LOCAL_EMBEDDING_MODEL = "local"
"""``embedding_model`` value that selects the bundled all-MiniLM-L6-v2 model."""

LOCAL_INSTALL = install_hint("local")
"""How README installs the ``[local]`` extra (from a clone), quoted in every hint."""


REQUEST_FIELDS: dict[str, str] = {
    "model": "the request's model is the model setting (a variant's NAME), the name the "
    "results carry",
    "messages": "the request's messages are the benchmark's prompt",
    "temperature": "the request's temperature is the temperature setting, the one the "
    "results record",
    "n": "the benchmark scores one answer per request",
    "stream": "the reply is read whole, with its token usage",
    "stream_options": "the reply is read whole, with its token usage",
}
"""Fields of the chat request the graph sets itself, with why ``model_kwargs`` (merged into
the body last) may not: the results would record one request while another was sent."""


class PanelJudge(BaseModel):
    """One more judge of a panel (``Settings.judge_panel``): where it is, its key's
    variable, and its coherence threshold on its own scale (calibrated)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    coherence_threshold: float = Field(default=COHERENCE_THRESHOLD, ge=0.0, le=100.0)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return http_url(value)


class Settings(BaseModel):
    """Everything that decides how one AidanBench question is run and scored."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    model: str = Field(
        default="gpt-4o-mini",
        description="Model under test, as the endpoint names it.",
    )
    base_url: str | None = Field(
        default=None,
        description="OpenAI-compatible base URL of the model under test (None: OpenAI).",
    )
    api_key_env: str = Field(
        default="OPENAI_API_KEY",
        description="Environment variable holding the API key of the model under test.",
    )
    temperature: float = Field(
        default=0.7, ge=0.0, le=2.0, description="Sampling temperature of the model under test."
    )
    model_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra request fields for the model under test (max_tokens, "
        "reasoning_effort, provider routing…), recorded with the results. They cannot "
        "set the fields the request is built from (model, messages, temperature, n, "
        "stream, stream_options).",
    )
    variant_fields: dict[str, Any] | None = Field(
        default=None,
        description="Request fields of the model's variant: when set, ``model`` is "
        "NAME@LABEL, the row's name in every output, and the request sends NAME with these "
        "fields merged after model_kwargs (run: --variant LABEL=JSON). None: the model is "
        "sent as named, '@' and all.",
    )
    cot: bool = Field(default=False, description="Use the chain-of-thought generate prompt.")

    judge_model: str = Field(
        default=REFERENCE_JUDGE, description="Judge model (coherence, similarity)."
    )
    judge_base_url: str | None = Field(
        default=None, description="OpenAI-compatible base URL of the judge (None: OpenAI)."
    )
    judge_api_key_env: str = Field(
        default="OPENAI_API_KEY", description="Environment variable holding the judge's API key."
    )
    judge_temperature: float | None = Field(
        default=None,
        description="Judge temperature; None sends none (o1-mini accepts only its default).",
    )
    judge_attempts: int = Field(
        default=3,
        ge=1,
        le=10,
        description="How often an unreadable judge reply is asked for before the question "
        "stops with judge_error.",
    )
    judge_panel: tuple[PanelJudge, ...] = Field(
        default=(),
        description="More judges of coherence beside judge_model, each with its own "
        "endpoint, key and calibrated threshold: with any, an answer is coherent when "
        "more than half of the judges (judge_model at coherence_threshold first) pass it, "
        "and every judge's judgment is recorded.",
    )
    judge_samples: int = Field(
        default=1,
        ge=1,
        le=20,
        description="Coherence judgments asked per answer. The first decides, as the "
        "benchmark's one judgment; the others measure the judge's noise (spread, "
        "decisions that flip, an interval with judge resampling).",
    )

    embedding_model: str = Field(
        default=REFERENCE_EMBEDDING_MODEL,
        description="Embedding model for novelty; 'local' selects all-MiniLM-L6-v2 on this "
        "machine (pip install -e '.[local]').",
    )
    embedding_base_url: str | None = Field(
        default=None, description="OpenAI-compatible base URL for embeddings (None: OpenAI)."
    )
    embedding_api_key_env: str = Field(
        default="OPENAI_API_KEY",
        description="Environment variable holding the embeddings API key.",
    )

    llm_novelty: bool = Field(
        default=False,
        description="Also ask the judge how similar each answer is to every earlier one.",
    )
    coherence_threshold: float = Field(
        default=COHERENCE_THRESHOLD,
        ge=0.0,
        le=100.0,
        description="An answer passes when coherence > this.",
    )
    novelty_threshold: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="An answer passes when embedding novelty > this. None: "
        f"{NOVELTY_THRESHOLD:g}, the benchmark's value, or the calibrated value for the local "
        "model.",
    )
    llm_novelty_threshold: float = Field(
        default=NOVELTY_THRESHOLD,
        ge=0.0,
        le=1.0,
        description="An answer passes when LLM novelty > this.",
    )
    lexical_novelty: bool = Field(
        default=False,
        description="Also score lexical novelty: 1 - the largest Jaccard overlap of the "
        "answer's word 3-grams with an earlier answer's (no API call).",
    )
    lexical_novelty_threshold: float = Field(
        default=LEXICAL_NOVELTY_THRESHOLD,
        ge=0.0,
        le=1.0,
        description="An answer passes when lexical novelty > this (with lexical_novelty on).",
    )
    reward_mode: Literal["count", "novelty_sum"] = Field(
        default="count",
        description="What the output's reward (the environment's name) is: the score "
        "(count of valid answers) or the novelty sum, as the environment's reward_mode.",
    )
    max_answers: int | None = Field(
        default=None,
        ge=1,
        description="Stop after this many valid answers (stop reason max_answers). "
        "None: no ceiling, as in the benchmark.",
    )

    pipeline: bool = Field(
        default=True,
        description="Generate the next answer while the current one is scored; a "
        "speculative answer is discarded, never counted, when the current one fails.",
    )
    request_timeout: float = Field(
        default=300.0, gt=0, description="Seconds before one HTTP request is abandoned."
    )
    max_retries: int = Field(
        default=4,
        ge=0,
        le=20,
        description="Retries of a transient API error (429, 5xx, timeout, reset) before "
        "the question stops with reason error.",
    )
    max_concurrency: int | None = Field(
        default=None,
        ge=1,
        description="Most requests in flight per endpoint, shared by all questions: the "
        "ceiling of the adaptive limit (it grows while requests succeed, halves on 429), "
        "lowered to what the process's open-file limit allows. None: no fixed ceiling; "
        "it grows with the limit, as far as open files and memory allow.",
    )
    requests_per_minute: float | None = Field(
        default=None, gt=0, description="Request rate per endpoint; None: unlimited."
    )
    cache_path: str | None = Field(
        default=None,
        description="SQLite file caching embeddings and similarity judgements across "
        "restarts; None keeps them in memory.",
    )
    # Cost: prices and the per-question caps (services.pricing, services.usage, nodes.decide).
    prices_path: str | None = Field(
        default=None,
        description="JSON price table (docs/cost.md) whose models replace the bundled "
        "list prices; None: the bundled table.",
    )
    max_question_cost: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="Stop a question once its recorded answers and look-aheads cost this "
        "many dollars (stop reason max_question_cost; its score is a lower bound).",
    )
    max_question_seconds: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="Stop a question once it has run this many seconds (stop reason "
        "max_question_seconds; its score is a lower bound).",
    )

    interrupt_on_reject: bool = Field(
        default=False,
        description="Pause (interrupt) after each rejected answer so a person can inspect it.",
    )
    interrupt_every: int | None = Field(
        default=None, ge=1, description="Pause (interrupt) after every N scored answers."
    )

    @field_validator("base_url", "judge_base_url", "embedding_base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return http_url(value)

    @field_validator("model_kwargs", "variant_fields")
    @classmethod
    def _extra_request_fields(
        cls, value: dict[str, Any] | None, info: ValidationInfo
    ) -> dict[str, Any] | None:
        problem = None if value is None else extra_fields_problem(value)
        if problem is not None:
            raise ValueError(f"{info.field_name} {problem}")
        return value

    @model_validator(mode="after")
    def _variant_named(self) -> Settings:
        if self.variant_fields is not None and variant_label(self.model) is None:
            raise ValueError(
                f"variant_fields are set but model {self.model!r} names no variant (NAME@LABEL)"
            )
        return self

    @property
    def provider_model(self) -> str:
        """The model name sent to the provider (and priced): ``model`` without its
        ``@LABEL`` when it is a variant, else ``model`` as it is (some providers' ids hold
        an ``@``, as Vertex's ``claude-3-5-sonnet@20240620``)."""
        if self.variant_fields is None:
            return self.model
        return self.model.rpartition("@")[0]

    @property
    def token_limit_field(self) -> str:
        """The request field that raises the model's token limit (``token_limit_field``)."""
        return token_limit_field(self.provider_model, self.request_fields)

    @property
    def request_fields(self) -> dict[str, Any]:
        """The extra fields of the model's requests: ``model_kwargs``, then the variant's."""
        return {**self.model_kwargs, **(self.variant_fields or {})}

    @property
    def thresholds(self) -> Thresholds:
        """The pass rule in force, with the novelty default resolved for the embedding model."""
        return Thresholds(**{score.name: score.limit(self) for score in declared()})

    def endpoint(self, role: str) -> Endpoint:
        """Where ``role`` goes (a variant's NAME for the model under test). Every caller that
        reaches, names or checks a role's endpoint asks here."""
        fields = ROLE_FIELDS[role]
        model = self.provider_model if role == "model" else str(getattr(self, fields.model))
        return Endpoint(
            role, model, getattr(self, fields.base_url), str(getattr(self, fields.api_key_env))
        )

    @property
    def judges(self) -> list[Settings]:
        """The coherence judges, each as these settings with that judge in the judge's fields
        (``judge_model`` first, as it is): one, without a panel."""
        seats = [self]
        for seat in self.judge_panel:
            fields = {
                "judge_model": seat.model,
                "judge_base_url": seat.base_url,
                "judge_api_key_env": seat.api_key_env,
                "coherence_threshold": seat.coherence_threshold,
                "judge_panel": (),
            }
            seats.append(self.model_copy(update=fields))
        return seats

    def endpoints(self) -> list[Endpoint]:
        """Every endpoint the settings reach: each role's, and each panel judge's."""
        found = [self.endpoint(role) for role in ROLES]
        return found + [seat.endpoint("judge") for seat in self.judges[1:]]

    @property
    def resolved_novelty_threshold(self) -> float:
        """``novelty_threshold``, or the default for the chosen embedding model."""
        if self.novelty_threshold is not None:
            return self.novelty_threshold
        return default_novelty_threshold(self.embedding_model)


def http_url(value: str | None) -> str | None:
    """A base URL as given, checked: http(s) with a host, no credentials in it."""
    if value is None:
        return value
    credential = url_credential(value)
    if credential is not None:
        raise ValueError(
            f"base URL must not carry credentials ({credential}); put the key in the "
            "API-key variable"
        )
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"base URL must look like https://host/v1, got {value!r}")
    return value


def extra_fields_problem(fields: dict[str, Any]) -> str | None:
    """Why user-given request fields (``model_kwargs``, a variant's) cannot be sent, or None:
    a credential (they are recorded in metadata) or one of ``REQUEST_FIELDS``."""
    found = next(secret_paths(fields), None)
    if found is not None:
        return (
            f"must not carry credentials ({found!r} looks like one); keys are read only "
            "from the api_key_env variable"
        )
    core = next((key for key in REQUEST_FIELDS if key in fields), None)
    if core is not None:
        return f"must not set {core!r}: {REQUEST_FIELDS[core]}"
    return None


TOKEN_LIMIT_FIELDS = ("max_completion_tokens", "max_tokens")
"""Request fields that cap a reply's tokens: OpenAI's reasoning models take only the first
(their hidden reasoning counts against it); most other endpoints take the second."""

OPENAI_REASONING_PREFIXES = ("o1", "o3", "o4", "gpt-5")
"""Model names (after any ``openai/`` prefix) of OpenAI's reasoning models."""


def token_limit_field(model: str, fields: Mapping[str, Any]) -> str:
    """The request field that raises ``model``'s token limit: the one ``fields`` already set,
    else ``TOKEN_LIMIT_FIELDS``' choice for the model."""
    for name in TOKEN_LIMIT_FIELDS:
        if name in fields:
            return name
    bare = model.rsplit("/", 1)[-1].lower()
    if bare.startswith(OPENAI_REASONING_PREFIXES):
        return TOKEN_LIMIT_FIELDS[0]
    return TOKEN_LIMIT_FIELDS[1]


VARIANT_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:+-]*")
"""What a variant label may be: it becomes part of the row's name and its thread ids."""


def variant_problem(label: str, fields: Any) -> str | None:
    """Why ``label`` and its request ``fields`` cannot define a variant, or None."""
    if not VARIANT_LABEL.fullmatch(label):
        return (
            f"label {label!r} must start with a letter or digit and hold only letters, "
            "digits and . _ : + -"
        )
    if not isinstance(fields, dict):
        return f"fields must be a JSON object, got {type(fields).__name__}"
    return extra_fields_problem(fields)


def variant_label(model: str) -> str | None:
    """The ``LABEL`` of ``NAME@LABEL`` (the text after the last ``@``), or None."""
    name, at, label = model.rpartition("@")
    return label if at and name and label else None


def unused_variants(models: Sequence[str], variants: Mapping[str, Any]) -> list[str]:
    """Labels of ``variants`` that no model names (a typo, most likely)."""
    used = {variant_label(model) for model in models}
    return sorted(label for label in variants if label not in used)


CALIBRATED_NOVELTY_THRESHOLDS: dict[str, float] = {LOCAL_EMBEDDING_MODEL: 0.085}
"""Thresholds calibrated against the reference run for other embedding models."""


def default_novelty_threshold(embedding_model: str) -> float:
    """The benchmark's threshold, or a calibrated value where one was measured for the model."""
    return CALIBRATED_NOVELTY_THRESHOLDS.get(embedding_model, NOVELTY_THRESHOLD)


ROLES = ("model", "judge", "embeddings")
"""Every role of a run, in the order messages and checks take them."""

OPENAI_URL = "https://api.openai.com/v1"
"""Where a role with no base URL goes (the OpenAI SDK's default)."""


@dataclass(frozen=True)
class Endpoint:
    """One role's endpoint as the settings name it (``Settings.endpoint``)."""

    role: str
    """``model``, ``judge`` or ``embeddings``."""
    model: str
    """The model the endpoint is asked for (a variant's NAME, not the row's NAME@LABEL)."""
    base_url: str | None
    """As set; None: OpenAI's API."""
    key_env: str
    """The environment variable holding the role's key."""

    @property
    def local(self) -> bool:
        """Embeddings computed on this machine: no endpoint, no key."""
        return self.role == "embeddings" and self.model == LOCAL_EMBEDDING_MODEL

    @property
    def url(self) -> str:
        """The base URL the role reaches (``OPENAI_URL`` when none is set)."""
        return self.base_url or OPENAI_URL

    @property
    def host(self) -> str:
        """The endpoint's host (and port) for messages; ``local`` for local embeddings."""
        if self.local:
            return "local"
        if not self.base_url:
            return "api.openai.com"
        return urlsplit(self.base_url).netloc or self.base_url


@dataclass(frozen=True)
class RoleFields:
    """The settings fields that say which model a role uses, where and with which key."""

    model: str
    base_url: str
    api_key_env: str


ROLE_FIELDS: dict[str, RoleFields] = {
    "model": RoleFields("model", "base_url", "api_key_env"),
    "judge": RoleFields("judge_model", "judge_base_url", "judge_api_key_env"),
    "embeddings": RoleFields("embedding_model", "embedding_base_url", "embedding_api_key_env"),
}
"""Each role's fields; its flags are the fields' names (``flag_of``)."""

ROLE_NAMES: dict[str, str] = {
    "model": "model under test",
    "judge": "judge",
    "embeddings": "embedding model",
}
"""Each role as messages name it."""


def flag_of(field: str) -> str:
    """The ``aidanbench run`` flag of a settings field, as ``cli.options`` makes them."""
    return "--" + field.replace("_", "-")


def role_flag(role: str, which: Literal["model", "base_url", "api_key_env"]) -> str:
    """The flag that sets ``role``'s model, base URL or key variable."""
    return flag_of(getattr(ROLE_FIELDS[role], which))
