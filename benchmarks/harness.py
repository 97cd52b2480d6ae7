"""Timing helpers shared by the benchmarks: medians with min and max, and a results table."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Timing:
    """Seconds per call: median, min and max over `runs` measured calls."""

    median: float
    low: float
    high: float
    runs: int

    def __str__(self) -> str:
        return f"{_fmt(self.median)} (min {_fmt(self.low)}, max {_fmt(self.high)}, n={self.runs})"


def _fmt(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def measure(
    call: Callable[[], object], *, runs: int, warmup: int = 1, setup: Callable[[], object] | None = None
) -> Timing:
    """Time `call` `runs` times after `warmup` untimed calls; `setup` runs untimed before each call."""
    for _ in range(warmup):
        if setup is not None:
            setup()
        call()
    samples = []
    for _ in range(runs):
        if setup is not None:
            setup()
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return Timing(statistics.median(samples), min(samples), max(samples), runs)


def measure_rounds(calls: Mapping[str, Callable[[], object]], *, runs: int, warmup: int = 1) -> dict[str, Timing]:
    """Time every call once per round for `warmup` + `runs` rounds, the order rotating each round, so a change in
    the machine's load (other processes on a shared host) falls on every subject alike."""
    names = list(calls)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for index in range(warmup + runs):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            calls[name]()
            elapsed = time.perf_counter() - start
            if index >= warmup:
                samples[name].append(elapsed)
    return {name: Timing(statistics.median(s), min(s), max(s), runs) for name, s in samples.items()}


@dataclass
class Report:
    """Rows of (benchmark, subject, timing, ratio line) rendered as Markdown."""

    rows: list[tuple[str, str, str, str]] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)

    def add(self, benchmark: str, subject: str, timing: Timing, note: str = "") -> None:
        self.rows.append((benchmark, subject, str(timing), note))

    def target(self, description: str, measured: float, goal: float, higher_is_better: bool) -> None:
        met = measured >= goal if higher_is_better else measured <= goal
        comparison = "≥" if higher_is_better else "≤"
        self.verdicts.append(
            f"- {'MET' if met else 'NOT MET'}: {description}: {measured:.3g} (target {comparison} {goal:g})"
        )

    def markdown(self) -> str:
        lines = ["| benchmark | subject | time per call | ratio |", "| --- | --- | --- | --- |"]
        lines += [f"| {b} | {s} | {t} | {n} |" for b, s, t, n in self.rows]
        return "\n".join([*lines, "", "Targets:", *self.verdicts])
