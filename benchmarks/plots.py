"""PNG figures of the benchmark results (matplotlib, no display needed): medians with min-max bars."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from chat_history import Curve
from vector_search import Case

STYLE = {"linewidth": 1.6, "markersize": 5, "capsize": 3}


def _subject_style(name: str, memwoven: bool) -> dict[str, object]:
    return {"linestyle": "-" if memwoven else "--", "marker": "o" if memwoven else "s", **STYLE}


def vector_latency(cases: list[Case], path: Path) -> None:
    """p50 single-query latency against N, one panel per data set kind and dimension, bars from min to max."""
    panels = sorted({(c.kind, c.dimension) for c in cases})
    figure, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 5), squeeze=False)
    for axis, (kind, dimension) in zip(axes[0], panels):
        chosen = sorted((c for c in cases if (c.kind, c.dimension) == (kind, dimension)), key=lambda c: c.count)
        names = list(dict.fromkeys(r.subject for c in chosen for r in c.results))
        for name in names:
            points = [(c.count, r) for c in chosen if (r := c.get(name)) is not None]
            counts = [n for n, _ in points]
            p50 = [r.p50 * 1e3 for _, r in points]
            low = [p - min(r.latency) * 1e3 for p, (_, r) in zip(p50, points)]
            high = [max(r.latency) * 1e3 - p for p, (_, r) in zip(p50, points)]
            axis.errorbar(counts, p50, yerr=[low, high], label=name, **_subject_style(name, points[0][1].memwoven))
        axis.plot(
            [c.count for c in chosen], [c.floor * 1e3 for c in chosen], "k:", label="bandwidth floor (numpy scan)"
        )
        axis.set(xscale="log", yscale="log", xlabel="vectors (N)", ylabel="top-10 query latency, ms (p50, min-max)")
        axis.set_title(f"{kind} unit vectors, d = {dimension}")
        axis.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def chat_cost(curves: list[Curve], path: Path) -> None:
    """Per-turn write cost and load cost against history length, memwoven solid, peers dashed."""
    operations = ["save +2", "append 2", "load"]
    figure, axes = plt.subplots(1, 3, figsize=(19, 5.5), squeeze=False)
    for axis, operation in zip(axes[0], operations):
        for curve in curves:
            peer_turn = operation == "save +2" and not curve.memwoven and curve.operation == "append 2"
            if curve.operation != operation and not peer_turn:
                continue
            sizes = sorted(curve.points)
            median = [curve.points[s].median * 1e3 for s in sizes]
            low = [m - curve.points[s].low * 1e3 for m, s in zip(median, sizes)]
            high = [curve.points[s].high * 1e3 - m for m, s in zip(median, sizes)]
            label = curve.subject if curve.memwoven else f"{curve.subject} (add turn)"
            axis.errorbar(sizes, median, yerr=[low, high], label=label, **_subject_style(curve.subject, curve.memwoven))
        title = {
            "save +2": "memwoven save(history + 2) vs peers adding a turn",
            "append 2": "add one turn (2 messages)",
            "load": "load",
        }
        axis.set(xscale="log", yscale="log", xlabel="messages already in the session", ylabel="ms (median, min-max)")
        axis.set_title(title[operation])
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=6)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def ratios(rows: list[tuple[str, float, float, float]], path: Path) -> None:
    """Horizontal bars of speed-ups (peer time / memwoven time; > 1 means memwoven is faster), min-max whiskers."""
    if not rows:
        return
    figure, axis = plt.subplots(figsize=(14, 0.42 * len(rows) + 1.5))
    labels = [label for label, *_ in rows]
    values = [value for _, value, _, _ in rows]
    errors = [[max(v - low, 0) for _, v, low, _ in rows], [max(high - v, 0) for _, v, _, high in rows]]
    colors = ["tab:green" if v >= 1 else "tab:red" for v in values]
    positions = range(len(rows))
    axis.barh(positions, values, xerr=errors, color=colors, capsize=3)
    axis.set_yticks(list(positions), labels, fontsize=8)
    axis.invert_yaxis()
    axis.axvline(1.0, color="black", linewidth=1)
    axis.set_xscale("log")
    axis.set_xlabel("memwoven speed-up: peer median / memwoven median (whiskers: min and max)")
    for position, value in zip(positions, values):
        axis.text(value * 1.08, position - 0.3, f"{value:.3g}x", va="center", fontsize=8)
    low, high = axis.get_xlim()
    axis.set_xlim(low, high * 3)
    axis.grid(True, axis="x", which="both", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
