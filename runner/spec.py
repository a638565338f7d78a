"""A run's specification: what to measure, where to write it, and how to reach the models.

``RunSpec`` is what the Python API takes and ``aidanbench run`` builds. ``settings`` holds
the ``Settings`` fields given for this session (not ``RUN_FIELDS``); a field left out takes
its default, or with ``use_stored_settings`` the run directory's recorded value.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from aidanbench.core.errors import QuestionSourceError, UsageError, printable
from aidanbench.core.settings import (
    LOCAL_EMBEDDING_MODEL,
    Settings,
    flag_of,
    unused_variants,
    variant_label,
    variant_problem,
)
from aidanbench.graph.questions import bundled_questions, validated
from aidanbench.record import files
from aidanbench.record.lines import normal_text, spelling_note, spelling_problem
from aidanbench.runner.tasks import Task
from aidanbench.services.pricing import PriceFileError, price_table

RUN_FIELDS = frozenset({"model", "temperature", "variant_fields", "cache_path"})
"""Settings fields a run sets itself, per task (a variant's fields from ``variants``) or
from its directory."""


class RunSpec(BaseModel):
    """Everything one session of a run needs: the grid of threads and the settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    models: list[str] = Field(min_length=1, description="Models under test.")
    temperatures: list[float] = Field(
        default_factory=lambda: [Settings.model_fields["temperature"].default],
        min_length=1,
        description="Sampling temperatures.",
    )
    questions: list[str] = Field(
        min_length=1,
        description="Question texts; an integer N means the first N bundled questions.",
    )
    questions_source: dict[str, Any] = Field(
        default_factory=lambda: {"kind": "list"},
        description="Where the questions came from, recorded in metadata.",
    )
    categories: dict[str, str] = Field(
        default_factory=dict,
        description="A category for questions that have one (question → category), which "
        "reports group scores by; it changes nothing asked or scored.",
    )
    repeats: int = Field(default=1, ge=1, description="Runs of each question.")
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="Settings fields given for this session (not model, temperature, cache_path).",
    )
    variants: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Request fields of each variant label: a model named NAME@LABEL is a "
        "row of its own, sent as NAME with LABEL's fields merged into its requests after "
        "model_kwargs. A name whose label is not here is sent as it is.",
    )
    run_dir: Path = Field(description="The run directory (created, or grown and resumed).")
    server: str | None = Field(
        default=None, description="Run the questions on this LangGraph server instead."
    )
    store: str | None = Field(
        default=None,
        repr=False,
        description="A campaign store shared by several machines: postgresql://USER@HOST:"
        "PORT/DATABASE (runner.campaign). The threads' checkpoints go there and each "
        "thread is claimed before it runs (runner.claims); the run directory stays local. "
        "Never recorded as given: the password is removed.",
    )
    claim_lease: float = Field(
        default=60.0,
        gt=0,
        allow_inf_nan=False,
        description="With a store: seconds a worker's claim on a thread lives without a "
        "heartbeat, so a killed worker's threads are taken over after this long.",
    )
    claim_poll: float = Field(
        default=5.0,
        gt=0,
        allow_inf_nan=False,
        description="With a store: seconds between two looks at threads claimed elsewhere.",
    )
    store_outage: float = Field(
        default=60.0,
        gt=0,
        allow_inf_nan=False,
        description="With a store: seconds a store that stops answering is waited for "
        "(every request to it retried) before the run gives up on it (runner.campaign).",
    )
    concurrency: int | None = Field(
        default=None,
        ge=1,
        description="Questions in flight; None: every question of the session, up to a "
        "memory ceiling (runner.admission).",
    )
    workers: int | None = Field(
        default=None,
        ge=1,
        description="Worker processes the questions are spread over; None: one per 256 "
        "question threads of the session, up to the machine's cores (runner.workers).",
    )
    max_cost: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="Dollars the run may spend over all its sessions; once reached no "
        "question starts and those in flight stop at their next turn (stop reason budget).",
    )
    coherence_threshold_source: dict[str, Any] | None = Field(
        default=None,
        description="Where the coherence threshold came from, recorded per model in the "
        "metadata: a calibration file ({'kind': 'calibration', 'file', 'sha256', "
        "'judge_model'}); None: given, or the benchmark's 15 when left at its default.",
    )
    panel_threshold_sources: list[dict[str, Any] | None] = Field(
        default_factory=list,
        description="Where each judge of a judge panel after the first took its coherence "
        "threshold (as coherence_threshold_source), in the panel's order.",
    )
    use_stored_settings: bool = Field(
        default=False,
        description="Settings left out take the run directory's recorded values instead "
        "of their defaults.",
    )
    preflight: bool = Field(
        default=True,
        description="Check every role's endpoint and model before anything is written "
        "(runner.preflight); off for an endpoint that objects to GET /models or to a "
        "one-line request.",
    )

    @field_validator("questions", mode="before")
    @classmethod
    def _bundled(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return bundled_questions(value)
        return value

    @field_validator("questions")
    @classmethod
    def _one_spelling(cls, value: list[str]) -> list[str]:
        """Each question in its normal form; two spellings of one are refused."""
        try:
            return validated(value, "questions")
        except QuestionSourceError as exc:
            raise ValueError(str(exc)) from None

    @model_validator(mode="after")
    def _categories_of_questions(self) -> RunSpec:
        """Categories keyed as the questions are (their normal form), each one of them."""
        normal = {normal_text(q): normal_text(c) for q, c in self.categories.items()}
        strays = [q for q in normal if q not in set(self.questions)]
        if strays:
            raise ValueError(f"categories name a question not asked: {strays[0][:60]!r}")
        if any(not c for c in normal.values()):
            raise ValueError("a category must be named; got an empty one")
        object.__setattr__(self, "categories", normal)
        return self

    @field_validator("models")
    @classmethod
    def _distinct_models(cls, value: list[str]) -> list[str]:
        """Each model name as given, in its normal form already (``spelling_problem``): it
        is sent, recorded, reported and forgotten as one spelling."""
        for model in value:
            if not normal_text(model):
                raise ValueError("a model must be named; got an empty name")
            problem = spelling_problem(model)
            if problem is not None:
                raise ValueError(f"model {problem}")
        if len(set(value)) != len(value):
            raise ValueError("a model is given twice")
        return value

    @field_validator("temperatures")
    @classmethod
    def _distinct_temperatures(cls, value: list[float]) -> list[float]:
        if len(set(value)) != len(value):
            raise ValueError("a temperature is given twice")
        return value

    @field_validator("settings")
    @classmethod
    def _settings_fields(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(value) - set(Settings.model_fields))
        if unknown:
            raise ValueError(f"not a Settings field: {', '.join(unknown)}")
        reserved = sorted(set(value) & RUN_FIELDS)
        if reserved:
            raise ValueError(f"set by the run, not in settings: {', '.join(reserved)}")
        return value

    @field_validator("variants")
    @classmethod
    def _variant_fields(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Each label in its normal form, as model names are (a twin is refused)."""
        labels: dict[str, str] = {}
        for label, fields in value.items():
            name = normal_text(label)
            if name in labels:
                raise ValueError(f"a variant is given twice{spelling_note(labels[name], label)}")
            labels[name] = label
            problem = variant_problem(name, fields)
            if problem is not None:
                raise ValueError(f"variant {label!r}: {problem}")
        return {name: value[label] for name, label in labels.items()}

    @model_validator(mode="after")
    def _variants_used(self) -> RunSpec:
        unused = unused_variants(self.models, self.variants)
        if unused:
            raise ValueError(
                f"variant {unused[0]!r} is defined but no model is named NAME@{unused[0]}"
            )
        return self

    def variant_fields(self, model: str) -> dict[str, Any] | None:
        """The request fields of ``model``'s variant, or None when it names none defined."""
        label = variant_label(model)
        return None if label is None else self.variants.get(label)

    def provider_model(self, model: str) -> str:
        """The name ``model`` is sent and priced as (``Settings.provider_model``)."""
        return Settings(model=model, variant_fields=self.variant_fields(model)).provider_model

    @property
    def questions_list(self) -> list[str]:
        """The questions, each once, in order."""
        return list(dict.fromkeys(self.questions))


def given_settings(values: dict[str, Any]) -> dict[str, Any]:
    """Only the fields whose value differs from the ``Settings`` default: the command line
    passes every flag, and ``--use-stored-settings`` fills the rest from the run directory."""
    given = {}
    for name, value in values.items():
        default = Settings.model_fields[name].get_default(call_default_factory=True)
        if value != default:
            given[name] = value
    return given


def run_fields(spec: RunSpec) -> dict[str, Any]:
    """The cache and the price table's whole path; a server run gets no prices file (a path
    on this machine): its dollars come from the bundled prices."""
    local = spec.server is None
    prices = spec.settings.get("prices_path")
    return {
        "cache_path": str(spec.run_dir / files.CACHE),
        "prices_path": str(Path(prices).resolve()) if local and prices else None,
    }


def make_settings(
    model: str, temperature: float, fields: dict[str, Any], own: dict[str, Any]
) -> Settings:
    """One (model, temperature)'s settings; a bad value is one ``UsageError`` line."""
    try:
        return Settings(model=model, temperature=temperature, **(fields | own))
    except ValidationError as exc:
        raise UsageError(validation_line(exc)) from None


def build_tasks(
    spec: RunSpec, fields_of: dict[str, dict[str, Any]], questions: list[str]
) -> list[Task]:
    """Every (model, temperature, repeat, question) of the session, in a stable order."""
    tasks: list[Task] = []
    for model in spec.models:
        own = run_fields(spec)
        variant = spec.variant_fields(model)
        if variant is not None:
            own["variant_fields"] = variant
        for temperature in spec.temperatures:
            settings = make_settings(model, temperature, fields_of[model], own)
            for repeat in range(1, spec.repeats + 1):
                tasks.extend(Task(settings, q, repeat) for q in questions)
    return tasks


def validation_line(exc: ValidationError, flag: Callable[[str], str] = flag_of) -> str:
    """The first error as one line naming the ``flag`` of its field; the value is shown
    only when it cannot be a secret (URLs, variable names and request fields never are)."""
    first = exc.errors()[0]
    field = str(first["loc"][0]) if first["loc"] else "settings"
    message = printable(str(first["msg"]))
    secret = any(str(part).endswith(("url", "_env", "kwargs")) for part in first["loc"])
    if "got " in message or secret:
        return f"invalid {flag(field)}: {message}"
    return f"invalid {flag(field)}: {message} (got {printable(repr(first.get('input')))})"


def check_prices(spec: RunSpec) -> None:
    """Refuse an unreadable price table, or a dollar cap it cannot count (``UsageError``):
    a cap needs a price for every model that spends (the models as sent, the judge and, for
    ``--max-cost``, a remote embedding model). A provider that reports no usage needs no
    refusing: its tokens are estimated from above (``services.usage``)."""
    settings = Settings(model=spec.models[0], **spec.settings)
    try:
        table = price_table(settings.prices_path)
    except PriceFileError as exc:
        raise UsageError(printable(str(exc))) from None
    if spec.max_cost is None and settings.max_question_cost is None:
        return
    spending = [*(spec.provider_model(m) for m in spec.models), settings.judge_model]
    if spec.max_cost is not None and settings.embedding_model != LOCAL_EMBEDDING_MODEL:
        spending.append(settings.embedding_model)
    unpriced = [m for m in dict.fromkeys(spending) if table.price(m) is None]
    if unpriced:
        flag = "--max-cost" if spec.max_cost is not None else "--max-question-cost"
        raise UsageError(
            f"{flag} needs prices, and {', '.join(printable(m) for m in unpriced)} "
            "has none; give them with --prices FILE"
        )
