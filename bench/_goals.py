"""Issue 19's goals for the step-loop benchmark, and the summary table that sets each figure
against its goal. Pure: it formats and judges what bench/step_loop.py measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Sequence

from _workload import LONG_K, K

# Issue 19, "Done when" (2 cores, K=5 no-op tool calls per run, 11 steps).
SEQUENTIAL_SQLITE_MS = 0.8
SEQUENTIAL_SQLITE_FLOORS = 4.8  # the same goal as a ratio to the bare-commit floor
SEQUENTIAL_POSTGRES_MS = 1.0
RATE_SQLITE = 3000.0
RATE_POSTGRES = 2000.0
PEAK_RSS_MIB = 80.0
P99_OVER_MEDIAN = 3.0
LONG_K_COST = 0.10  # per-step cost at K=50 no more than 10% above K=5's
SECURED_COST = 0.15  # TLS, grants and 10% tracing within 15% of the plain figures


@dataclasses.dataclass(frozen=True)
class Summary:
    """One configuration's headline figures (seconds per step, steps/s, MiB, ratios)."""

    per_step: float
    p99_over_median: float
    rate: float
    rss_mb: float
    cpu_ms: float  # runtime + tool host, per step
    long_per_step: float  # p50 run / its steps; nan without K=50 runs
    p50_per_step: float


@dataclasses.dataclass(frozen=True)
class Row:
    """One figure of the summary: what was measured (text), the goal (text), and the verdict:
    True met, False missed, None no goal or not measured."""

    figure: str
    measured: str
    goal: str
    met: bool | None
    others: tuple[str, ...] = ()  # the same figure from the --against checkout(s)


def verdict(met: bool | None, measured: str) -> str:
    if met is None:
        return "-" if measured.startswith("not measured") else ""
    return "met" if met else "MISSED"


def at_most(value: float, limit: float) -> bool | None:
    return None if math.isnan(value) else value <= limit


def at_least(value: float, limit: float) -> bool | None:
    return None if math.isnan(value) else value >= limit


def table(rows: Sequence[Row], *, other_names: Sequence[str] = ()) -> str:
    """The summary as aligned text: figure, measured, goal, met (and the other checkouts')."""
    head = ("figure", "measured", "goal", "met", *other_names)
    body = [(r.figure, r.measured, r.goal, verdict(r.met, r.measured), *r.others) for r in rows]
    widths = [max(len(line[i]) for line in (head, *body)) for i in range(len(head))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=False)).rstrip()

    missed = sum(1 for r in rows if r.met is False)
    met = sum(1 for r in rows if r.met is True)
    rule = "  ".join("-" * width for width in widths)
    return "\n".join(
        [line(head), rule, *(line(cells) for cells in body), rule, f"goals met: {met}, missed: {missed}"]
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f} ms"


def _pct(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.1f}%"


def summary_rows(results: dict[str, tuple[float, dict[str, Summary]]], args: argparse.Namespace) -> list[Row]:
    """Every figure of issue 19's "Done when", measured or marked not measured, with its goal."""
    rows: list[Row] = []
    others = ("against",) if args.against else ()
    backends = (
        ("sqlite", "SQLite FULL", SEQUENTIAL_SQLITE_MS, RATE_SQLITE),
        ("postgresql", "PostgreSQL", SEQUENTIAL_POSTGRES_MS, RATE_POSTGRES),
    )
    for key, title, ms_goal, rate_goal in backends:
        skipped = f"not measured (--skip-{key.removesuffix('ql')})"
        if key not in results:
            skipped = skipped if key == "sqlite" or not args.quick else "not measured (--quick)"
            for figure, goal in (
                (f"floor (bare commit per step), {title}", "-"),
                (f"sequential per-step, {title}", f"<= {ms_goal:g} ms"),
                (f"steps/s at {args.concurrent} concurrent runs, {title}", f">= {rate_goal:,.0f}"),
            ):
                rows.append(Row(figure, skipped, goal, None, tuple("" for _ in others)))
            continue
        floor_s, by_role = results[key]
        plain = by_role["plain"]
        compared = [by_role[role] for role in others]

        def row(figure: str, goal: str, met: bool | None, text: str, values: list[str]) -> None:
            rows.append(Row(figure, text, goal, met, tuple(values)))

        row(f"floor (bare commit per step), {title}", "-", None, _ms(floor_s), ["" for _ in compared])
        row(
            f"sequential per-step, {title}",
            f"<= {ms_goal:g} ms",
            at_most(plain.per_step * 1000, ms_goal),
            _ms(plain.per_step),
            [_ms(s.per_step) for s in compared],
        )
        if key == "sqlite":
            row(
                f"sequential per-step / floor, {title}",
                f"<= {SEQUENTIAL_SQLITE_FLOORS:g}x",
                at_most(plain.per_step / floor_s, SEQUENTIAL_SQLITE_FLOORS),
                f"{plain.per_step / floor_s:.1f}x",
                [f"{s.per_step / floor_s:.1f}x" for s in compared],
            )
        row(
            f"steps/s at {args.concurrent} concurrent runs, {title}",
            f">= {rate_goal:,.0f}",
            at_least(plain.rate, rate_goal),
            f"{plain.rate:,.0f}",
            [f"{s.rate:,.0f}" for s in compared],
        )
        # No goal: the steadier figure on a shared machine, for side-by-side comparisons.
        row(
            f"CPU per step, runtime + tool host, {title}",
            "-",
            None,
            f"{plain.cpu_ms:.3f} ms",
            [f"{s.cpu_ms:.3f} ms" for s in compared],
        )
        row(
            f"runtime peak RSS at {args.concurrent} concurrent runs, {title}",
            f"<= {PEAK_RSS_MIB:g} MiB",
            at_most(plain.rss_mb, PEAK_RSS_MIB),
            f"{plain.rss_mb:.1f} MiB",
            [f"{s.rss_mb:.1f} MiB" for s in compared],
        )
        row(
            f"per-run p99/median (sequential), {title}",
            f"<= {P99_OVER_MEDIAN:g}",
            at_most(plain.p99_over_median, P99_OVER_MEDIAN),
            f"{plain.p99_over_median:.2f}",
            [f"{s.p99_over_median:.2f}" for s in compared],
        )
        long_figure = f"per-step cost at K={LONG_K} vs K={K} (run p50s), {title}"
        long_goal = f"<= +{LONG_K_COST:.0%}"
        if args.long_runs:
            row(
                long_figure,
                long_goal,
                at_most(plain.long_per_step / plain.p50_per_step, 1 + LONG_K_COST),
                _pct(plain.long_per_step / plain.p50_per_step),
                [_pct(s.long_per_step / s.p50_per_step) for s in compared],
            )
        else:
            row(long_figure, long_goal, None, "not measured (--long-runs 0)", ["" for _ in compared])
        secured = by_role.get("secured")
        per_step_goal, rate_goal_ = f"<= +{SECURED_COST:.0%}", f">= -{SECURED_COST:.0%}"
        per_step_figure = f"per-step with TLS, grants, tracing 10% vs plain, {title}"
        rate_figure = f"steps/s with TLS, grants, tracing 10% vs plain, {title}"
        blank = ["" for _ in compared]
        if secured is None:
            skipped = f"not measured ({args.secure_skipped_by})"
            row(per_step_figure, per_step_goal, None, skipped, blank)
            row(rate_figure, rate_goal_, None, skipped, blank)
            continue
        ratio = secured.per_step / plain.per_step
        row(per_step_figure, per_step_goal, at_most(ratio, 1 + SECURED_COST), _pct(ratio), blank)
        ratio = secured.rate / plain.rate
        row(rate_figure, rate_goal_, at_least(ratio, 1 - SECURED_COST), _pct(ratio), blank)
    return rows
