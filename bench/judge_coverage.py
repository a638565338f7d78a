"""How often the judge-noise interval holds actual re-judgings of the same run.

A stub judge of known noise scores the published run's answers: ``slope`` × o1-mini's
recorded score plus Gaussian noise of ``sd`` points, and a share ``inverted`` of its
judgments on the scale turned over (``100 - x``), rounded and clipped to 0-100 as a
judge's reply is; each judgment is a fresh draw, a pure function of the seed, the prompt
and which request for it this is. For each noise setting:

1. ``aidanbench rescore --judge-samples K`` (the real command, over HTTP) judges every
   answer K times and reports each model's score and its 95% interval under re-judging
   (``analysis.judge_noise``);
2. ``--rejudgings`` more rescores, each with a judge of a new seed and one judgment per
   answer, are the actual re-judgings of the same run;
3. coverage is the share of (model, re-judging) pairs whose score falls in that model's
   interval: at nominal 95% it should be at least 90%.

    python -m bench.judge_coverage                      # sd 8 and 12, 8% and 15% inverted
    python -m bench.judge_coverage --rejudgings 40 --settings 10:0.1
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from aidanbench import reference
from aidanbench.cli.main import main
from aidanbench.testing import OpenAIStub
from aidanbench.testing.judges import RecordedJudge, Rule
from aidanbench.testing.published import published_chains
from aidanbench.testing.replay import ReplayBrain

KEY = "AIDANBENCH_COVERAGE_KEY"


def gaussian(slope: float, sd: float, inverted: float, seed: int) -> Rule:
    """``slope`` × the recorded score plus Gaussian noise of ``sd``, turned over
    (``100 - x``) with probability ``inverted``; the n-th request for a prompt gets the
    n-th draw of (seed, prompt)."""

    def rule(recorded: float, prompt: str, n: int) -> int:
        digest = hashlib.sha256(f"{seed}|{n}|{prompt}".encode()).digest()
        draws = np.random.default_rng(int.from_bytes(digest[:8], "big"))
        value = slope * recorded + draws.normal(0.0, sd)
        if draws.random() < inverted:
            value = 100 - value
        return max(0, min(100, round(value)))

    return rule


def rescore(server: OpenAIStub, cache: Path, samples: int, threshold: float) -> dict[str, Any]:
    """``aidanbench rescore --json`` of the published run by the server's judge."""
    argv = ["rescore", str(reference.published_run()), "--judge-model", "noisy-judge"]
    argv += ["--judge-base-url", server.base_url, "--judge-api-key-env", KEY, "--json"]
    argv += ["--coherence-threshold", f"{threshold:g}", "--novelty-threshold", "0.15"]
    argv += ["--cache", str(cache), "--judge-samples", str(samples)]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    if status != 0:
        raise RuntimeError(f"rescore exited {status}: {err.getvalue()[-500:]}")
    payload: dict[str, Any] = json.loads(out.getvalue())
    return payload


def measure(
    sd: float, inverted: float, args: argparse.Namespace, folder: Path
) -> list[dict[str, Any]]:
    """Per model: the interval of one K-judged rescore and the scores of the re-judgings."""
    chains = published_chains()
    inner = ReplayBrain(chains)

    def judge(seed: int) -> RecordedJudge:
        return RecordedJudge(chains, gaussian(args.slope, sd, inverted, seed), inner)

    rows: dict[str, dict[str, Any]] = {}
    with OpenAIStub(judge(0)) as server:
        sampled = rescore(
            server, folder / f"k-{sd}-{inverted}.sqlite", args.samples, args.threshold
        )
        for run in sampled["runs"]:
            noise = run["judge_noise"]
            rows[run["model"]] = {
                "model": run["model"],
                "score": run["score"],
                "interval": noise["rejudged_interval"],
                "model_sd": noise["rejudged_sd"],
                "rejudged": [],
            }
        for seed in range(1, args.rejudgings + 1):
            server.brain = judge(seed)
            again = rescore(server, folder / f"r{seed}-{sd}-{inverted}.sqlite", 1, args.threshold)
            for run in again["runs"]:
                rows[run["model"]]["rejudged"].append(run["score"])
    return list(rows.values())


def setting(text: str) -> tuple[float, float]:
    sd, _, share = text.partition(":")
    return float(sd), float(share)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=3, help="judgments per answer (K)")
    parser.add_argument("--rejudgings", type=int, default=20, help="actual re-judgings")
    parser.add_argument("--slope", type=float, default=0.7, help="the judge's scale")
    parser.add_argument(
        "--threshold", type=float, default=10.0, help="the coherence threshold (0.7 × 15)"
    )
    parser.add_argument(
        "--settings",
        type=setting,
        nargs="+",
        default=[(8.0, 0.08), (8.0, 0.15), (12.0, 0.08), (12.0, 0.15)],
        metavar="SD:INVERTED",
    )
    args = parser.parse_args()
    os.environ.setdefault(KEY, "sk-coverage-not-a-key")
    started = time.monotonic()
    covered = total = 0
    print(
        f"K = {args.samples} judgments per answer, {args.rejudgings} re-judgings, judge "
        f"{args.slope:g} × o1-mini + noise, coherence > {args.threshold:g}"
    )
    print(
        f"{'sd':>4} {'inverted':>8}  {'model':<38} {'score':>6} {'95% interval':>16} "
        f"{'model sd':>8} {'re-judged: range':>17} {'sd':>6} {'covered':>8}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for sd, inverted in args.settings:
            for row in measure(sd, inverted, args, Path(tmp)):
                low, high = row["interval"]
                scores = np.asarray(row["rejudged"], dtype=float)
                inside = int(((scores >= low) & (scores <= high)).sum())
                covered, total = covered + inside, total + len(scores)
                print(
                    f"{sd:>4g} {inverted:>8.0%}  {row['model']:<38} {row['score']:>6g} "
                    f"{f'[{low:g}, {high:g}]':>16} {row['model_sd']:>8.1f} "
                    f"{f'[{scores.min():g}, {scores.max():g}]':>17} {scores.std():>6.1f} "
                    f"{f'{inside}/{len(scores)}':>8}"
                )
    share = covered / total if total else math.nan
    print(
        f"coverage: {covered}/{total} = {share:.1%} of re-judgings inside the nominal 95% "
        f"interval ({time.monotonic() - started:.0f} s)"
    )


if __name__ == "__main__":
    cli()
