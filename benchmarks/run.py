"""Run the benchmarks side by side and write benchmarks/results/latest.md. `--quick` for a CI smoke run."""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import _threads  # noqa: F401  (before numpy)
import chat_history
import langchain_history
import llama_index_bench
import numpy as np
import plots
import qdrant_bench
import redis_bench
import sql_vector
import vector_search
import window_bench
from harness import Report

RESULTS = Path(__file__).parent / "results"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> str:
    try:
        return f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB RAM"
    except (ValueError, OSError):
        return "RAM unknown"


def machine() -> str:
    """Facts about the machine and the packages measured."""
    names = ["memweave", "numpy", "SQLAlchemy", "langchain-core", "langchain-community", "llama-index-core"]
    names += ["langchain-memweave", "llama-index-memweave", "redis", "qdrant-client", "faiss-cpu", "sqlite-vec"]
    names += ["llama-index-storage-chat-store-redis", "matplotlib"]
    packages = ", ".join(f"{name} {_version(name)}" for name in names)
    config = np.show_config(mode="dicts").get("Build Dependencies", {})  # type: ignore[union-attr]
    blas = config.get("blas", {})
    python = f"{platform.python_implementation()} {platform.python_version()}"
    cpu = f"{_cpu_model()}, {os.cpu_count()} logical cores, {_memory_gib()}, {platform.system()} {platform.release()}"
    threads = f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}"
    return f"{cpu}; {python}, numpy BLAS {blas.get('name', '?')} {blas.get('version', '')} ({threads}); {packages}"


def _version(name: str) -> str:
    try:
        return version(name)
    except Exception:
        return "not installed"


# (kind, N, d) per mode; slow pure-Python peers and Qdrant local run only up to SLOW_LIMIT floats (N x d)
QUICK_CASES = [("random", 10_000, 384)]
FULL_CASES = [
    ("random", 10_000, 384),
    ("random", 100_000, 384),
    ("clustered", 10_000, 384),
    ("clustered", 100_000, 384),
    ("random", 10_000, 1536),
    ("random", 100_000, 1536),
]
SLOW_LIMIT = 100_000 * 384


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller data and fewer runs (under 2 minutes)")
    parser.add_argument("--note", default="", help="a remark written under the machine facts (e.g. other load)")
    args = parser.parse_args()
    started = time.perf_counter()
    report = Report()
    postgres = os.environ.get("MEMWEAVE_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
    redis = os.environ.get("MEMWEAVE_REDIS_URL", "redis://127.0.0.1:6379/0")

    bandwidth = vector_search.memory_bandwidth()
    cases = [
        vector_search.run_case(
            kind,
            count,
            dimension,
            bandwidth=bandwidth,
            postgres=postgres,
            redis=redis,
            budget=1.5 if args.quick else 8.0,
            slow_limit=SLOW_LIMIT,
        )
        for kind, count, dimension in (QUICK_CASES if args.quick else FULL_CASES)
    ]
    vector_search.targets(report, cases)
    sizes = (10, 100, 1_000) if args.quick else (10, 100, 1_000, 10_000)
    runs = 5 if args.quick else 15
    ours, skipped = chat_history.memweave_curves(sizes, runs, postgres=postgres, redis=redis)
    theirs, skipped_peers = chat_history.peer_curves(sizes, runs, redis=redis)
    curves = ours + theirs
    chat_history.targets(report, curves)

    sql_vector.run(report, url=postgres, count=10_000 if args.quick else 100_000)
    langchain_history.run(report, turns=200 if args.quick else 1_000, runs=1 if args.quick else 3)
    llama_index_bench.run(report, count=10_000 if args.quick else 100_000, runs=3 if args.quick else 10)
    redis_bench.run(report, url=redis, runs=10 if args.quick else 30)
    if args.quick:
        qdrant_bench.run(report, count=10_000, upsert_runs=2, search_runs=10)
    else:  # local-mode Qdrant takes ~20-30 s per 100k upsert: 2 runs each there
        qdrant_bench.run(report, count=10_000, upsert_runs=3)
        qdrant_bench.run(report, count=100_000, upsert_runs=2, warmup=0, search_runs=10)
    window_bench.run(report, quick=args.quick)

    RESULTS.mkdir(exist_ok=True)
    mode = "quick" if args.quick else "full"
    figures = {
        "vector": RESULTS / f"{mode}_vector_latency.png",
        "chat": RESULTS / f"{mode}_chat_turn_cost.png",
        "ratios": RESULTS / f"{mode}_speedups.png",
    }
    plots.vector_latency(cases, figures["vector"])
    plots.chat_cost(curves, figures["chat"])
    plots.ratios(vector_search.ratio_rows(cases) + chat_history.ratio_rows(curves), figures["ratios"])
    elapsed = time.perf_counter() - started
    text = "\n".join(
        [
            f"# memweave benchmarks ({mode})",
            "",
            f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {elapsed:.0f} s — {machine()}",
            "",
            *([args.note, ""] if args.note else []),
            "Every time is the median of several runs, with min and max and the number of runs (n). Ratios are "
            "memweave / peer or peer / memweave as labelled; absolute times vary between machines.",
            "",
            *(f"![{name}]({path.name})" for name, path in figures.items()),
            "",
            "## Vector search and ingest",
            "",
            vector_search.markdown(cases, bandwidth),
            "## Chat history: cost per turn against history length",
            "",
            chat_history.markdown(curves, skipped + skipped_peers),
            "",
            "## All rows and targets",
            "",
            report.markdown(),
            "",
        ]
    )
    print(text)
    (RESULTS / ("quick.md" if args.quick else "latest.md")).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
