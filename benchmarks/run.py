"""Run the benchmarks side by side and write benchmarks/results/latest.md. `--quick` for a CI smoke run."""

from __future__ import annotations

import argparse
import os
import platform
import sys
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import chat_save
import langchain_history
import llama_index_bench
import numpy as np
import qdrant_bench
import redis_bench
import sql_vector
import vector_search
import window_bench
from harness import Report

RESULTS = Path(__file__).parent / "results"


def machine() -> str:
    """Facts about the machine and the packages measured."""
    names = ["memweave", "numpy", "SQLAlchemy", "langchain-core", "langchain-community", "llama-index-core"]
    names += ["langchain-memweave", "llama-index-memweave", "redis", "qdrant-client"]
    packages = ", ".join(f"{name} {version(name)}" for name in names)
    blas = np.show_config(mode="dicts").get("Build Dependencies", {}).get("blas", {}).get("name", "?")  # type: ignore[union-attr]
    python = f"{platform.python_implementation()} {platform.python_version()}"
    return f"{platform.processor() or platform.machine()}, {python}, BLAS {blas}; {packages}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller data and fewer runs (under 2 minutes)")
    args = parser.parse_args()
    report = Report()
    vector_search.run(report, count=10_000 if args.quick else 100_000)
    chat_save.run(report, runs=10 if args.quick else 30)
    postgres = os.environ.get("MEMWEAVE_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
    chat_save.run(report, runs=10 if args.quick else 30, url=postgres)
    sql_vector.run(report, url=postgres, count=10_000 if args.quick else 100_000)
    langchain_history.run(report, turns=200 if args.quick else 1_000, runs=1 if args.quick else 3)
    llama_index_bench.run(report, count=10_000 if args.quick else 100_000, runs=3 if args.quick else 10)
    redis = os.environ.get("MEMWEAVE_REDIS_URL", "redis://127.0.0.1:6379/0")
    redis_bench.run(report, url=redis, runs=10 if args.quick else 30)
    if args.quick:
        qdrant_bench.run(report, count=10_000, upsert_runs=2, search_runs=10)
    else:  # local-mode Qdrant takes ~20-30 s per 100k upsert: 2 runs each there
        qdrant_bench.run(report, count=10_000, upsert_runs=3)
        qdrant_bench.run(report, count=100_000, upsert_runs=2, warmup=0, search_runs=10)
    window_bench.run(report, quick=args.quick)
    text = "\n".join(
        [
            f"# memweave benchmarks ({'quick' if args.quick else 'full'})",
            "",
            f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC — {machine()}",
            "",
            report.markdown(),
            "",
        ]
    )
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / ("quick.md" if args.quick else "latest.md")).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
