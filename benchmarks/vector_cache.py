"""A new worker on a collection whose machine-wide cache file exists (`SQLVectorMemory(cache_dir=...)`).

Fill N x 384 through one object, let a first process load the collection (it writes the cache file), then start a
second process: the time from its spawn to its first result, and the resident memory it adds beyond the shared
mapping (its private pages after the first result minus before opening the collection: /proc/self/status RssAnon;
the mapped file's resident pages are counted apart, from /proc/self/smaps). Then its warm top-10 searches,
interleaved with `InMemoryVectorMemory`'s on the same data, and its recall against it. Without the cache, the same
start-up for comparison. N is 100,000 (10,000 with --quick); `MEMWOVEN_BENCH_CACHE_COUNT` sets it (1,000,000 for
the issue's target: the fill takes minutes).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import _threads  # noqa: F401  (before numpy: one BLAS thread here and in the workers, as in run.py)
import numpy as np
from harness import Report, Timing
from vector_search import _corpus, _memwoven

from memwoven import SQLVectorMemory, VectorDocument

_WORKER = r"""
import time
started = time.time()  # the interpreter is up
import json, sys
import numpy as np

def status():
    found = {}
    with open("/proc/self/status") as lines:
        for line in lines:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
                found[name] = int(value.split()[0]) / 1024
    return found

def mapped(directory):
    total, inside = 0, False
    with open("/proc/self/smaps") as lines:
        for line in lines:
            if "-" in line.split(" ", 1)[0]:
                inside = ".mwvc" in line and directory in line
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1])
    return total / 1024

url, prefix, cache, queries_path = sys.argv[1:5]
queries = np.load(queries_path)
from memwoven import SQLVectorMemory
imported = time.time()
before = status()
memory = SQLVectorMemory(url, table_prefix=prefix, collection="bench", cache_dir=cache if cache != "off" else False)
opened = time.time()
hits = memory.search(queries[0].tolist(), top_k=10)
answered = time.time()
after = status()
found = mapped(cache) if cache != "off" else 0.0
first = [imported, answered, before, after, found, [h.document.id for h in hits], started, opened]
print(json.dumps(first), flush=True)
for line in sys.stdin:
    index = int(line)
    start = time.perf_counter()
    hits = memory.search(queries[index % len(queries)].tolist(), top_k=10)
    print(json.dumps([time.perf_counter() - start, [h.document.id for h in hits]]), flush=True)
memory.close()
"""


class _Worker:
    """A new process (a plain interpreter, as a fresh web worker would be) on the collection; `first` is its report
    after the first search: (imports done, first result) wall-clock times, status before and after, MB mapped, ids,
    (interpreter up, object made) wall-clock times."""

    def __init__(self, url: str, prefix: str, cache: str, queries: str) -> None:
        self.spawned = time.time()
        self.process = subprocess.Popen(
            [sys.executable, "-c", _WORKER, url, prefix, cache, queries],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.first = self._read()

    def _read(self) -> Any:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker failed (exit code {self.process.wait()})")
        return json.loads(line)

    def search(self, index: int) -> tuple[float, list[str]]:
        """Time one warm search in the worker."""
        assert self.process.stdin is not None
        self.process.stdin.write(f"{index}\n")
        self.process.stdin.flush()
        seconds, ids = self._read()
        return seconds, ids

    def stop(self) -> None:
        """End the worker."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(120)


def run(report: Report, *, url: str, count: int, runs: int = 30) -> None:
    """Add the new-worker rows (with and without the cache) and the issue's targets to `report`."""
    ids, vectors, queries = _corpus(count, 384)
    prefix = f"mwbench_{uuid.uuid4().hex[:8]}_"
    cache = tempfile.mkdtemp(prefix="memwoven-cache-bench-")
    queries_path = str(Path(cache) / "queries.npy")
    np.save(queries_path, queries)
    label = url.split(":", 1)[0]
    name = f"new worker with cache_dir, {count:,}x384 ({label})"
    writer = SQLVectorMemory(url, table_prefix=prefix, collection="bench", dimension=384)
    try:
        started = time.perf_counter()
        for start in range(0, count, 5_000):
            writer.store(
                VectorDocument(id=i, content=i, embedding=v)
                for i, v in zip(ids[start : start + 5_000], vectors[start : start + 5_000])
            )
        fill = time.perf_counter() - started
        cold = _Worker(url, prefix, "off", queries_path)
        cold.stop()
        first = _Worker(url, prefix, cache, queries_path)  # reads the table, writes the file
        first.stop()
        worker = _Worker(url, prefix, cache, queries_path)
        memory = _memwoven(ids, vectors)
        try:
            hits_agree = [worker.first[5] == [h.document.id for h in memory.search(queries[0], top_k=10)]]
            cached: list[float] = []
            local: list[float] = []

            def remote(index: int) -> None:
                elapsed, found = worker.search(index)
                cached.append(elapsed)
                expected = [h.document.id for h in memory.search(queries[index % len(queries)], top_k=10)]
                hits_agree.append(found == expected)

            def in_memory(index: int) -> None:
                start = time.perf_counter()
                memory.search(queries[index % len(queries)], top_k=10)
                local.append(time.perf_counter() - start)

            for index in range(runs):
                for search in (remote, in_memory) if index % 2 == 0 else (in_memory, remote):
                    search(index)
        finally:
            worker.stop()
    finally:
        writer.drop_tables()
        writer.close()
        shutil.rmtree(cache, ignore_errors=True)
    imported, answered, before, after, mapped, _, started, opened = worker.first
    seconds = answered - worker.spawned
    added = after["RssAnon"] - before["RssAnon"]
    matrix = count * 384 * 4 / 2**20
    recall = sum(hits_agree) / len(hits_agree)
    report.add(name, f"fill ({count:,} documents, 5,000 per store)", _one(fill))
    for label_, run_ in (("without the cache", cold), ("with the cache, first (writes the file)", first)):
        report.add(
            name,
            f"new process {label_}: spawn -> first result",
            _one(run_.first[1] - run_.spawned),
            f"open -> first result {run_.first[1] - run_.first[0]:.2f} s, "
            f"+{run_.first[3]['RssAnon'] - run_.first[2]['RssAnon']:.0f} MB private "
            f"(peak {run_.first[3]['VmHWM'] - run_.first[2]['VmRSS']:.0f} MB over the start)",
        )
    report.add(
        name,
        "second process with the cache: spawn -> first result",
        _one(seconds),
        f"interpreter start {started - worker.spawned:.2f} s, imports (numpy, memwoven) {imported - started:.2f} s, "
        f"open {opened - imported:.2f} s, first search {answered - opened:.2f} s; +{added:.0f} MB private, "
        f"{mapped:.0f} MB of the file mapped ({matrix:.0f} MB matrix)",
    )
    baseline, ours = _timing(local), _timing(cached)
    ratio = ours.median / baseline.median
    report.add(name, "InMemoryVectorMemory, warm top-10", baseline, "1.0")
    report.add(name, "second process with the cache, warm top-10", ours, f"{ratio:.2f}x, recall {recall:.2f}")
    report.target(f"{name}: second process spawn -> first result (s)", seconds, 1.0, False)
    report.target(f"{name}: second process resident memory beyond the mapping (MB)", added, 150, False)
    report.target(f"{name}: warm p50 / in-memory", ratio, 1.2, False)
    report.target(f"{name}: recall@10 (top-10 equal to the in-memory store's)", recall, 1.0, True)


def _one(seconds: float) -> Timing:
    return Timing(seconds, seconds, seconds, 1)


def _timing(samples: list[float]) -> Timing:
    return Timing(float(np.median(samples)), min(samples), max(samples), len(samples))


if __name__ == "__main__":  # a standalone run: python benchmarks/vector_cache.py URL [COUNT]
    standalone = Report()
    run(standalone, url=sys.argv[1], count=int(sys.argv[2]) if len(sys.argv) > 2 else 100_000)
    print(standalone.markdown())
    Path(tempfile.gettempdir(), "vector_cache_bench.md").write_text(standalone.markdown(), encoding="utf-8")
