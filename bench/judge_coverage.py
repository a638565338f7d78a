"""How often the judge-noise interval holds a fresh re-judging of the same run, interval by
interval, for judges of several noise shapes.

A stub judge of known noise (``testing.judges.NOISE_SHAPES``, each around 0.7 × o1-mini's
recorded score, coherence > 10.5) judges the published run's answers; each judgment is a fresh
draw, a pure function of the judge's seed, the prompt and which request for it this is. For
each shape:

1. the distribution of each model's re-judged score: ``--simulated`` re-judgings drawn from the
   shape and walked as ``rescore`` walks (``testing.judges.rejudged_scores``);
2. ``--rejudgings`` actual re-judgings, ``aidanbench rescore`` (the real command, over HTTP)
   with judges of new seeds, one judgment per answer: each must score exactly what the
   simulation's walk gives for that judge's own judgments, and together they are compared
   with the simulated distribution (two-sample Kolmogorov-Smirnov, per model);
3. ``--intervals`` independent intervals: ``rescore --judge-samples K``, each with a judge of
   a new seed, giving every model's interval (``analysis.judge_noise``);
4. each interval's coverage: the share of the simulated re-judgings inside it. The interval is
   the unit: a shape's mean coverage gets a 95% interval from resampling the rescores whole
   (one rescore's five intervals share its judgments, so they are not independent).

At nominal 95% the mean should be at least 90% and no interval under 50%, or the interval
says that K judgments cannot support it (``unsupported``: ``needed_samples`` is set).

    python -m bench.judge_coverage                      # every shape, K = 3, 6 intervals each
    python -m bench.judge_coverage --shapes length skewed --intervals 10 --samples 5
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import resource
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from aidanbench import reference
from aidanbench.analysis.rejudge import coherence_prompt
from aidanbench.cli.main import main
from aidanbench.record.results import QuestionResult
from aidanbench.testing import OpenAIStub
from aidanbench.testing.judges import (
    NOISE_SHAPES,
    NoiseShape,
    RecordedJudge,
    prompt_keys,
    prompt_scores,
    rejudged_scores,
    walked_scores,
)
from aidanbench.testing.published import published_chains
from aidanbench.testing.replay import ReplayBrain

KEY = "AIDANBENCH_COVERAGE_KEY"
NOVELTY = 0.15
INTERVAL_SEED = 1000
"""Judge seeds of the K-judged rescores start here; the re-judgings' are 1, 2, …"""
TRUTH_SEED = 20241
CLUSTER_RESAMPLES = 10_000


def rescore(server: OpenAIStub, cache: Path, samples: int, threshold: float) -> dict[str, Any]:
    """``aidanbench rescore --json`` of the published run by the server's judge."""
    argv = ["rescore", str(reference.published_run()), "--judge-model", "noisy-judge"]
    argv += ["--judge-base-url", server.base_url, "--judge-api-key-env", KEY, "--json"]
    argv += ["--coherence-threshold", f"{threshold:g}", "--novelty-threshold", f"{NOVELTY:g}"]
    argv += ["--cache", str(cache), "--judge-samples", str(samples)]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    if status != 0:
        raise RuntimeError(f"rescore exited {status}: {err.getvalue()[-500:]}")
    payload: dict[str, Any] = json.loads(out.getvalue())
    return payload


def ks_pvalue(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov p-value, asymptotic (Stephens' correction for small
    samples); with tied scores it errs high, towards "no difference"."""
    grid = np.union1d(a, b)
    gap = np.max(
        np.abs(
            np.searchsorted(np.sort(a), grid, side="right") / len(a)
            - np.searchsorted(np.sort(b), grid, side="right") / len(b)
        )
    )
    size = math.sqrt(len(a) * len(b) / (len(a) + len(b)))
    lam = (size + 0.12 + 0.11 / size) * gap
    if lam < 1e-3:
        return 1.0
    terms = [2 * (-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam) for k in range(1, 101)]
    return float(min(1.0, max(0.0, sum(terms))))


@dataclass
class Cell:
    """One model under one noise shape."""

    model: str
    simulated: np.ndarray
    actual: list[float] = field(default_factory=list)
    intervals: list[tuple[float, float]] = field(default_factory=list)
    needed: list[int | None] = field(default_factory=list)

    def coverage(self) -> np.ndarray:
        """Each interval's share of the simulated re-judgings."""
        return np.asarray(
            [np.mean((self.simulated >= lo) & (self.simulated <= hi)) for lo, hi in self.intervals]
        )

    def central_half_held(self) -> int:
        """Intervals holding the simulated re-judgings' 25th to 75th percentile."""
        low, high = np.percentile(self.simulated, [25, 75])
        return sum(1 for lo, hi in self.intervals if lo <= low and hi >= high)

    def range_95(self) -> tuple[float, float]:
        low, high = np.percentile(self.simulated, [2.5, 97.5])
        return float(low), float(high)


def judge(chains: Sequence[QuestionResult], shape: NoiseShape, seed: int) -> RecordedJudge:
    return RecordedJudge(chains, shape.rule(seed), ReplayBrain(chains))


def first_judgments(chains: Sequence[QuestionResult], shape: NoiseShape, seed: int) -> np.ndarray:
    """The judgment the judge of ``seed`` gives each prompt when first asked: (1 x prompts)."""
    rule = shape.rule(seed)
    found = [
        rule(recorded, coherence_prompt(question, answer), 1)
        for (question, answer), recorded in zip(
            prompt_keys(chains), prompt_scores(chains), strict=True
        )
    ]
    return np.asarray([found], dtype=np.float64)


def measure(
    shape: NoiseShape, args: argparse.Namespace, chains: Sequence[QuestionResult], folder: Path
) -> list[Cell]:
    """Every model's simulated re-judgings, actual re-judgings and intervals under ``shape``."""
    rng = np.random.default_rng(TRUTH_SEED)
    simulated = rejudged_scores(chains, shape, args.threshold, NOVELTY, rng, args.simulated)
    cells = {model: Cell(model, scores) for model, scores in simulated.items()}
    with OpenAIStub(judge(chains, shape, 1)) as server:
        for seed in range(1, args.rejudgings + 1):
            server.brain = judge(chains, shape, seed)
            again = rescore(server, folder / f"{shape.name}-r{seed}.sqlite", 1, args.threshold)
            walked = walked_scores(
                chains, first_judgments(chains, shape, seed), args.threshold, NOVELTY
            )
            for run in again["runs"]:
                if run["score"] != walked[run["model"]][0]:
                    raise RuntimeError(
                        f"{shape.name}, judge {seed}: rescore gave {run['model']} "
                        f"{run['score']}, the simulation's walk {walked[run['model']][0]:g}"
                    )
                cells[run["model"]].actual.append(run["score"])
        for i in range(args.intervals):
            seed = INTERVAL_SEED + i
            server.brain = judge(chains, shape, seed)
            cache = folder / f"{shape.name}-k{seed}.sqlite"
            sampled = rescore(server, cache, args.samples, args.threshold)
            for run in sampled["runs"]:
                noise = run["judge_noise"]
                cells[run["model"]].intervals.append(tuple(noise["rejudged_interval"]))
                cells[run["model"]].needed.append(noise["needed_samples"])
    return list(cells.values())


def span(pair: Sequence[float]) -> str:
    return f"[{pair[0]:.0f}, {pair[1]:.0f}]"


def cluster_interval(coverage: np.ndarray) -> tuple[float, float]:
    """95% interval of the mean of (rescores x models) coverages, rescores resampled whole."""
    rng = np.random.default_rng(TRUTH_SEED)
    rows = rng.integers(0, coverage.shape[0], size=(CLUSTER_RESAMPLES, coverage.shape[0]))
    means = coverage[rows].mean(axis=(1, 2))
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def shape_table(shape: NoiseShape, cells: Sequence[Cell]) -> dict[str, Any]:
    """Print a shape's table, one row per model; return its summary."""
    print(f"\n#### {shape.name}: {shape.text}\n")
    print(
        "| model | re-judged: 95% range | central half | actual re-judgings (KS p) | "
        "coverage per interval: mean, lowest | central half held | unsupported |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for cell in cells:
        covered = cell.coverage()
        actual = ", ".join(f"{s:g}" for s in cell.actual)
        p = ks_pvalue(np.asarray(cell.actual), cell.simulated) if cell.actual else math.nan
        unsupported = sum(1 for n in cell.needed if n is not None)
        needed = sorted({n for n in cell.needed if n is not None})
        print(
            f"| {cell.model} | {span(cell.range_95())} | "
            f"{span(np.percentile(cell.simulated, [25, 75]))} | {actual} ({p:.2f}) | "
            f"{covered.mean():.1%}, {covered.min():.1%} | {cell.central_half_held()} of "
            f"{len(cell.intervals)} | {unsupported}"
            + (f" (K = {', '.join(map(str, needed))})" if needed else "")
            + " |"
        )
    coverage = np.stack([cell.coverage() for cell in cells], axis=1)  # rescores x models
    widths = [
        (hi - lo) / max(cell.range_95()[1] - cell.range_95()[0], 1)
        for cell in cells
        for lo, hi in cell.intervals
    ]
    supported = np.stack([np.asarray([n is None for n in cell.needed]) for cell in cells], axis=1)
    return {
        "shape": shape,
        "mean": float(coverage.mean()),
        "ci": cluster_interval(coverage),
        "lowest": float(coverage.min()),
        "under_half": int((coverage < 0.5).sum()),
        "under_half_supported": int(((coverage < 0.5) & supported).sum()),
        "intervals": coverage.size,
        "held": sum(cell.central_half_held() for cell in cells),
        "width": float(np.median(widths)),
        "unsupported": int((~supported).sum()),
        "supported_mean": float(coverage[supported].mean()) if supported.any() else math.nan,
        "supported_lowest": float(coverage[supported].min()) if supported.any() else math.nan,
    }


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=3, help="judgments per answer (K)")
    parser.add_argument("--intervals", type=int, default=6, help="K-judged rescores per shape")
    parser.add_argument(
        "--rejudgings", type=int, default=5, help="actual re-judgings per shape (checks)"
    )
    parser.add_argument(
        "--simulated", type=int, default=20_000, help="simulated re-judgings per shape"
    )
    parser.add_argument(
        "--threshold", type=float, default=10.5, help="the coherence threshold (0.7 × 15)"
    )
    parser.add_argument(
        "--shapes", nargs="+", choices=list(NOISE_SHAPES), default=list(NOISE_SHAPES)
    )
    args = parser.parse_args()
    os.environ.setdefault(KEY, "sk-coverage-not-a-key")
    started, cpu = time.monotonic(), time.process_time()
    chains = published_chains()
    print(
        f"K = {args.samples} judgments per answer, {args.intervals} intervals and "
        f"{args.rejudgings} actual re-judgings per noise shape, {args.simulated:,} simulated "
        f"re-judgings; judge 0.7 × o1-mini + noise, coherence > {args.threshold:g}, "
        f"novelty > {NOVELTY:g}; nominal 95%"
    )
    summaries = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.shapes:
            shape = NOISE_SHAPES[name]
            summaries.append(shape_table(shape, measure(shape, args, chains, Path(tmp))))
    print(
        "\n| noise | mean coverage per interval (95% CI, clustered by rescore) | lowest | "
        "under 50% (of them supported) | central half held | width ÷ 95% range | "
        "unsupported | the rest: mean, lowest |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for s in summaries:
        low, high = s["ci"]
        rest = (
            "none"
            if math.isnan(s["supported_mean"])
            else f"{s['supported_mean']:.1%}, {s['supported_lowest']:.1%}"
        )
        print(
            f"| {s['shape'].name} | {s['mean']:.1%} ({low:.1%}-{high:.1%}) | "
            f"{s['lowest']:.1%} | {s['under_half']} ({s['under_half_supported']}) | "
            f"{s['held']} of {s['intervals']} | {s['width']:.2f} | {s['unsupported']} | {rest} |"
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"\n{time.monotonic() - started:.0f} s of wall time, {time.process_time() - cpu:.0f} s "
        f"of CPU, {peak:.0f} MB peak, load average {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    cli()
