"""What model calls cost: the price table and the dollars of a call.

Prices are USD per million tokens for each of the four counts the Messages API reports
(:class:`jpfs.infra.providers.base.Usage`): fresh input, output, cache reads and cache
writes. :data:`PRICES` ships the published prices of current Claude models (5-minute
cache writes); ``[prices."MODEL"]`` tables in ``.jpfs/config.toml`` add models or
replace a shipped entry whole (a local model can cost 0):

    [prices."claude-sonnet-4-5"]
    input = 3.0
    output = 15.0
    cache_read = 0.30
    cache_creation = 3.75

A model is looked up by its name, then by the longest table key it extends with a
``-`` (``claude-sonnet-4-5-20250929`` is priced as ``claude-sonnet-4-5``). A model
found nowhere has no price: its calls' ``cost_usd`` is unknown, never guessed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jpfs.errors import ConfigError
from jpfs.infra.providers.base import Usage

FIELDS = ("input", "output", "cache_read", "cache_creation")


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float
    cache_read: float
    cache_creation: float

    def cost(self, usage: Usage) -> float:
        dollars = (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_read_input_tokens * self.cache_read
            + usage.cache_creation_input_tokens * self.cache_creation
        ) / 1_000_000
        # Micro-dollars: sums of many calls stay exact to the cent, and files stay short.
        return round(dollars, 6)


PRICES: dict[str, Price] = {
    "claude-opus-4-5": Price(5.0, 25.0, 0.50, 6.25),
    "claude-opus-4-1": Price(15.0, 75.0, 1.50, 18.75),
    "claude-opus-4": Price(15.0, 75.0, 1.50, 18.75),
    "claude-sonnet-4-5": Price(3.0, 15.0, 0.30, 3.75),
    "claude-sonnet-4": Price(3.0, 15.0, 0.30, 3.75),
    "claude-3-7-sonnet": Price(3.0, 15.0, 0.30, 3.75),
    "claude-haiku-4-5": Price(1.0, 5.0, 0.10, 1.25),
    "claude-3-5-haiku": Price(0.80, 4.0, 0.08, 1.0),
    "claude-3-haiku": Price(0.25, 1.25, 0.03, 0.30),
}


def check_table(value: Any, where: str) -> dict[str, Price]:
    """A ``[prices]`` table from a config layer, checked: each model a table of the four
    prices, numbers >= 0 and finite. Errors name the layer and the model."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: prices must be a table of models")
    out: dict[str, Price] = {}
    for model, entry in value.items():
        label = f'{where}: prices."{model}"'
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{label} must be a table with {', '.join(FIELDS)}")
        unknown = sorted(set(entry) - set(FIELDS))
        if unknown:
            raise ConfigError(f"{label}: unknown key {unknown[0]!r} (keys: {', '.join(FIELDS)})")
        missing = [f for f in FIELDS if f not in entry]
        if missing:
            raise ConfigError(f"{label}: missing {', '.join(missing)} (USD per million tokens)")
        numbers = []
        for name in FIELDS:
            item = entry[name]
            if isinstance(item, bool) or not isinstance(item, int | float):
                raise ConfigError(f"{label}.{name} must be a number, got {item!r}")
            if not math.isfinite(item) or item < 0:
                raise ConfigError(f"{label}.{name} must be a finite number >= 0, got {item!r}")
            numbers.append(float(item))
        out[str(model)] = Price(*numbers)
    return out


def table(configured: Mapping[str, Any] | None = None) -> dict[str, Price]:
    """The shipped table with the configured entries over it."""
    merged = dict(PRICES)
    if configured:
        merged.update(check_table(configured, "prices"))
    return merged


def price_of(model: str, prices: Mapping[str, Price]) -> Price | None:
    found = prices.get(model)
    if found is not None:
        return found
    best = ""
    for key in prices:
        if model.startswith(key + "-") and len(key) > len(best):
            best = key
    return prices[best] if best else None


def cost_of(usage: Usage, model: str, prices: Mapping[str, Price]) -> float | None:
    """What ``usage`` cost on ``model``; None when the model has no price."""
    price = price_of(model, prices)
    return None if price is None else price.cost(usage)


def no_price(model: str) -> str:
    """Why a cost is unknown, and what to do about it."""
    return (
        f'no price for model {model!r}: add a [prices."{model}"] table to .jpfs/config.toml'
        " (input, output, cache_read, cache_creation: USD per million tokens)"
    )
