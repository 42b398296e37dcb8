"""Issue 19's goals for the step-loop benchmark, and the summary table that sets each figure
against its goal. Pure: it formats what was measured and judges nothing else.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

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
        [line(head), rule, *(line(cells) for cells in body), rule, f"{met} goals met, {missed} missed"]
    )
