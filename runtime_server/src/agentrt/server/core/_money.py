"""Money as integer micro-dollars (1 = US$0.000001): exact sums, exact conversions.

Usage and budgets carry ``cost_micros`` / ``max_cost_micros`` integers, so a run's spend is a
sum of integers and a budget check compares integers. Config stays in decimal dollars (TOML
``input_per_mtok = 0.15``, ``max_cost_usd = 0.5``) and is converted through the number's
shortest decimal text, never through binary float arithmetic. Runs stored before money was
exact carry ``cost_usd`` / ``max_cost_usd`` floats; :func:`upgrade_money_json` converts them
on read.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Any

MICROS_PER_USD = 1_000_000

# Legacy (float dollars) key -> current (integer micro-dollars) key, in stored proto3 JSON.
_LEGACY_KEYS = {"cost_usd": "cost_micros", "max_cost_usd": "max_cost_micros"}


def _decimal(value: float | int | str | Decimal) -> Decimal:
    # repr of a float is its shortest round-tripping decimal: 0.1 is "0.1", not 0.1000000000000000055...
    try:
        exact = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    except InvalidOperation:
        raise ValueError(f"not a number: {str(value)[:40]!r}") from None
    if not exact.is_finite():
        raise ValueError("money must be a finite number")
    return exact


def usd_to_micros(value: float | int | str | Decimal) -> int:
    """Dollars (as written in config or an old record) as micro-dollars, rounded half-even.

    Raises:
        ValueError: the value is not a finite number.
    """
    return int((_decimal(value) * MICROS_PER_USD).to_integral_value(ROUND_HALF_EVEN))


def micros_to_usd(micros: int) -> float:
    """Micro-dollars as a float of dollars, for config models that hold dollars.

    Exact round trip through :func:`usd_to_micros` for any amount below 10**9 dollars: such a
    decimal has at most 15 significant digits, which a double keeps.
    """
    return micros / MICROS_PER_USD


def format_usd(micros: int) -> str:
    """Micro-dollars as a dollar amount with all six decimals, e.g. 12300 -> "0.012300"."""
    sign = "-" if micros < 0 else ""
    whole, frac = divmod(abs(micros), MICROS_PER_USD)
    return f"{sign}{whole}.{frac:06d}"


def price_micros(input_tokens: int, output_tokens: int, input_per_mtok: float, output_per_mtok: float) -> int:
    """What one model call costs: dollars per million tokens are micro-dollars per token.

    Rounded up to a whole micro-dollar per call, so a cost budget never under-counts a call.
    """
    exact = input_tokens * _decimal(input_per_mtok) + output_tokens * _decimal(output_per_mtok)
    return int(exact.to_integral_value(ROUND_CEILING))


def upgrade_money_json(data: Any) -> Any:
    """``data`` with legacy float-dollar keys replaced by micro-dollar keys, at any depth.

    Idempotent and cheap on current data: returns the same object when nothing needed changing.
    A legacy value that is not a finite number reads as 0 (a stored record must still load).
    """
    if isinstance(data, list):
        items = [upgrade_money_json(v) for v in data]
        return data if all(a is b for a, b in zip(items, data, strict=True)) else items
    if not isinstance(data, dict):
        return data
    out: dict[str, Any] | None = None
    for key, value in data.items():
        new_key = _LEGACY_KEYS.get(key)
        new_value = upgrade_money_json(value)
        if new_key is not None:
            try:
                new_value = usd_to_micros(value)
            except (ValueError, TypeError):
                new_value = 0
        if new_key is not None or new_value is not value:
            if out is None:
                out = {k: v for k, v in data.items()}
            if new_key is not None:
                del out[key]
                out.setdefault(new_key, new_value)
            else:
                out[key] = new_value
    return data if out is None else out
