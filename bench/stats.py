"""Interleaved rounds and their summary statistics."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

#: One lock+unlock cycle (or one operation); raises if the lock was not granted.
Cycle = Callable[[], None]


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation between order statistics."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def summary(rates: list[float]) -> dict[str, float]:
    """Median and p10/p90 of per-round rates (cycles per second)."""
    return {
        "median": statistics.median(rates),
        "p10": percentile(rates, 0.10),
        "p90": percentile(rates, 0.90),
        "rounds": len(rates),
    }


def batch(cycle: Cycle, seconds: float) -> float:
    """Run ``cycle`` until ``seconds`` have passed; the rate in cycles per second."""
    count = 0
    started = time.perf_counter()
    deadline = started + seconds
    now = started
    while now < deadline:
        cycle()
        count += 1
        now = time.perf_counter()
    return count / (now - started)


def interleave(
    contenders: Mapping[str, Cycle], *, rounds: int, seconds: float, warmup: float = 0.2
) -> dict[str, dict[str, Any]]:
    """Alternate the contenders in ``rounds`` rounds of ``seconds`` each.

    The starting contender rotates every round, so none always runs first (right after a
    context switch) or last. A short unmeasured warm-up per contender fills caches,
    connections and prepared plans first.

    Returns:
        ``{name: {"median", "p10", "p90", "rounds", "rates"}}`` in cycles per second.
    """
    names = list(contenders)
    for name in names:
        batch(contenders[name], warmup)
    rates: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            rates[name].append(batch(contenders[name], seconds))
    return {
        name: {**summary(values), "rates": [round(v, 1) for v in values]} for name, values in rates.items()
    }


def ratios(results: Mapping[str, Mapping[str, Any]], subject: str) -> dict[str, float]:
    """``subject``'s median divided by each other contender's median."""
    mine = results[subject]["median"]
    return {name: mine / r["median"] for name, r in results.items() if name != subject and r["median"]}


def target(value: float, bound: float, op: str) -> dict[str, Any]:
    """A target as the report holds it: the measured value, the bound (``op`` is
    ``">="`` or ``"<="``) and whether the value met it."""
    met = value >= bound if op == ">=" else value <= bound
    return {"value": round(value, 3), "bound": f"{op} {bound}", "met": met}
