"""Size and render time of the HTML report (``aidanbench view``) at the published and lab scale.

    python -m bench.view_scale [--repeats 5] [--keep DIR]

Builds the report of the published run (bundled in ``aidanbench.reference``) and of a
generated run of 20 models x 63 questions x 40 answers (original schema, answers of the
published run's mean length, 233 characters), then opens each in headless Chromium (the
system ``chromium``, through the tests' DevTools client) at 1280x800 from ``file://`` and
measures, median of ``--repeats`` fresh loads:

* file size;
* time to first render: ``performance.now()`` when the page's script has drawn the
  leaderboard, heat map and comparison (time since navigation start), and the first
  contentful paint;
* time to open one chain: a click on a heat-map cell until its answers and chart are in
  the DOM (parses that model's chains on first use).

Also prints how long Python took to build each file.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from aidanbench.analysis.view import write_view
from tests.browser import chromium, chromium_path
from tests.viewdata import PUBLISHED_RUN

WORDS = [
    "a",
    "city",
    "could",
    "turn",
    "the",
    "garage",
    "into",
    "a",
    "vertical",
    "farm",
    "with",
    "shared",
    "tools",
    "community",
    "workshop",
    "library",
    "for",
    "bikes",
    "solar",
    "roof",
    "market",
    "stalls",
    "night",
    "school",
    "rooftop",
    "cinema",
    "water",
    "storage",
    "for",
    "the",
    "district",
    "heat",
    "pump",
    "hub",
    "artists",
    "studios",
    "youth",
    "league",
    "courts",
]

BUDGETS = {
    "published": {"bytes": 1_000_000, "render_ms": 1000.0, "open_ms": 200.0},
    "lab": {"bytes": 25_000_000, "render_ms": 3000.0, "open_ms": 300.0},
}
"""The report's budget per scale: file size, time to first render, time to open a chain."""


def text(rng: random.Random, length: int = 233) -> str:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < length:
        words.append(rng.choice(WORDS))
    return " ".join(words).capitalize() + "."


def lab_run(path: Path, models: int = 20, questions: int = 63, answers: int = 40) -> Path:
    """An original-schema file: every chain has ``answers`` answers, the last failing."""
    rng = random.Random(20241)
    data: dict[str, Any] = {"models": {}}
    for m in range(models):
        chains = {}
        for q in range(questions):
            records = []
            for k in range(1, answers + 1):
                last = k == answers
                records.append(
                    {
                        "answer_num": k,
                        "answer": text(rng),
                        "coherence_score": 10 if last else rng.randint(40, 95),
                        "embedding_dissimilarity_score": round(rng.uniform(0.16, 0.9), 4),
                        "processing_time": round(rng.uniform(1, 9), 3),
                    }
                )
            chains[f"Question {q + 1}: what could one do with item number {q + 1}?"] = records
        data["models"][f"lab/model-{m + 1:02d}"] = {"0.7": chains}
    path.write_text(json.dumps(data), "utf-8")
    return path


def measure(html: Path, repeats: int) -> dict[str, float]:
    executable = chromium_path()
    if executable is None:
        raise SystemExit("chromium is not installed (apt-get install -y chromium)")
    renders, paints, opens, loads = [], [], [], []
    with chromium(executable) as browser:
        for _ in range(repeats):
            page = browser.new_page()
            page.viewport(1280, 800)
            started = time.perf_counter()
            page.open(html.as_uri())
            loads.append((time.perf_counter() - started) * 1000)
            renders.append(float(page.evaluate("document.documentElement.dataset.renderMs")))
            paints.append(
                page.evaluate(
                    "new Promise((done) => requestAnimationFrame(() => setTimeout(() => done("
                    "performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? -1"
                    "), 50)))"
                )
            )
            opens.append(
                page.evaluate(
                    "(() => { const t = performance.now();"
                    " document.querySelector('#grid button.cell').click();"
                    " if (!document.querySelector('#chain ol.answers li')) return -1;"
                    " return performance.now() - t; })()"
                )
            )
            assert not page.blocked, page.blocked
            browser.send("Target.closeTarget", {"targetId": page.target})
    return {
        "render_ms": statistics.median(renders),
        "fcp_ms": statistics.median(paints),
        "open_ms": statistics.median(opens),
        "load_wall_ms": statistics.median(loads),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--keep", type=Path, help="keep the generated files here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        where = args.keep or Path(scratch)
        where.mkdir(parents=True, exist_ok=True)
        inputs = {"published": PUBLISHED_RUN, "lab": lab_run(where / "lab-20x63x40.json")}
        print(
            f"machine: {platform.machine()}, {platform.processor() or 'cpu?'}, "
            f"python {platform.python_version()}"
        )
        print("scale      answers  bytes        build s  render ms  FCP ms  open ms  budget")
        for name, source in inputs.items():
            started = time.perf_counter()
            html = write_view([source], where / f"{name}.html")
            build = time.perf_counter() - started
            size = html.stat().st_size
            m = measure(html, args.repeats)
            answers = sum(
                len(chain)
                for temps in json.loads(source.read_text())["models"].values()
                for chains in temps.values()
                for chain in chains.values()
            )
            budget = BUDGETS[name]
            met = (
                size <= budget["bytes"]
                and m["render_ms"] <= budget["render_ms"]
                and m["open_ms"] <= budget["open_ms"]
            )
            print(
                f"{name:10} {answers:7,}  {size:11,}  {build:7.2f}  {m['render_ms']:9.0f}  "
                f"{m['fcp_ms']:6.0f}  {m['open_ms']:7.1f}  "
                f"{'met' if met else 'MISSED'} (≤ {budget['bytes'] / 1e6:g} MB, "
                f"≤ {budget['render_ms']:g} ms, open ≤ {budget['open_ms']:g} ms)"
            )


if __name__ == "__main__":
    main()
