"""What model calls cost: the price table and the dollars of a call.

Prices are USD per million tokens for each of the four counts the Messages API reports
(:class:`jpfs.infra.providers.base.Usage`): fresh input, output, cache reads and cache
writes. :data:`PRICES` ships the published prices of current Claude models (5-minute
cache writes) and of OpenAI's common models; ``[prices."MODEL"]`` tables in ``.jpfs/config.toml`` add models or
replace a shipped entry whole (a local model can cost 0):

    [prices."claude-sonnet-4-5"]
    input = 3.0
    output = 15.0
    cache_read = 0.30
    cache_creation = 3.75

A model is looked up by its name; a dated snapshot (``claude-sonnet-4-5-20250929``)
by its model's name; a gateway's name for the model asked for (``openai/gpt-4.1-mini``)
as that model (:func:`billed_as`). A model found nowhere has no price: its calls'
``cost_usd`` is unknown, never guessed from a neighbour.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from jpfs.errors import ConfigError

if TYPE_CHECKING:  # read only: every command loads the config, which checks [prices]
    from jpfs.infra.providers.base import Usage

FIELDS = ("input", "output", "cache_read", "cache_creation")
T = TypeVar("T")


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


# Anthropic's published prices as of November 2026 (platform.claude.com, "Pricing"):
# input, output, cache read, 5-minute cache write. Claude Haiku 5.5 is priced by prompt
# length; this is its band for prompts up to 100,000 tokens (longer ones cost 5x).
PRICES: dict[str, Price] = {
    "claude-fable-5-1": Price(10.0, 50.0, 0.25, 12.50),
    "claude-mythos-5-1": Price(10.0, 50.0, 0.25, 12.50),
    "claude-fable-5": Price(10.0, 50.0, 1.00, 12.50),
    "claude-mythos-5": Price(10.0, 50.0, 1.00, 12.50),
    "claude-opus-5-5": Price(4.0, 20.0, 0.20, 5.0),
    "claude-opus-5": Price(5.0, 25.0, 0.50, 6.25),
    "claude-opus-4-8": Price(5.0, 25.0, 0.50, 6.25),
    "claude-opus-4-7": Price(5.0, 25.0, 0.50, 6.25),
    "claude-opus-4-6": Price(5.0, 25.0, 0.50, 6.25),
    "claude-opus-4-5": Price(5.0, 25.0, 0.50, 6.25),
    "claude-opus-4-1": Price(15.0, 75.0, 1.50, 18.75),
    "claude-opus-4-0": Price(15.0, 75.0, 1.50, 18.75),
    "claude-sonnet-5-5": Price(2.0, 10.0, 0.10, 2.50),
    "claude-sonnet-5": Price(2.0, 10.0, 0.20, 2.50),
    "claude-sonnet-4-6": Price(3.0, 15.0, 0.30, 3.75),
    "claude-sonnet-4-5": Price(3.0, 15.0, 0.30, 3.75),
    "claude-sonnet-4-0": Price(3.0, 15.0, 0.30, 3.75),
    "claude-3-7-sonnet": Price(3.0, 15.0, 0.30, 3.75),
    "claude-haiku-5-5": Price(0.10, 0.50, 0.01, 0.125),
    "claude-haiku-4-5": Price(1.0, 5.0, 0.10, 1.25),
    "claude-3-5-haiku": Price(0.80, 4.0, 0.08, 1.0),
    "claude-3-haiku": Price(0.25, 1.25, 0.03, 0.30),
}
# OpenAI's published standard-tier prices (platform.openai.com, "Pricing") as of
# mid-2025: input, output, cached input. OpenAI charges nothing extra to write its
# cache (it caches long prefixes by itself), so a write is priced as fresh input.
PRICES.update(
    {
        "gpt-5": Price(1.25, 10.0, 0.125, 1.25),
        "gpt-5-mini": Price(0.25, 2.0, 0.025, 0.25),
        "gpt-5-nano": Price(0.05, 0.40, 0.005, 0.05),
        "gpt-4.1": Price(2.0, 8.0, 0.50, 2.0),
        "gpt-4.1-mini": Price(0.40, 1.60, 0.10, 0.40),
        "gpt-4.1-nano": Price(0.10, 0.40, 0.025, 0.10),
        "gpt-4o": Price(2.50, 10.0, 1.25, 2.50),
        "gpt-4o-mini": Price(0.15, 0.60, 0.075, 0.15),
        "o3": Price(2.0, 8.0, 0.50, 2.0),
        "o4-mini": Price(1.10, 4.40, 0.275, 1.10),
    }
)
# Names the API also takes for these models.
ALIASES = {"claude-opus-4": "claude-opus-4-0", "claude-sonnet-4": "claude-sonnet-4-0"}
# A snapshot's name is its model's and a date: claude-sonnet-4-5-20250929,
# gpt-4.1-2025-04-14.
_DATED = re.compile(r"(.+)-20(?:[0-9]{6}|[0-9]{2}-[0-9]{2}-[0-9]{2})")


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
    """``model``'s price: by its name, or a dated snapshot's by its model's name. A
    name jpfs does not know gets none, never a neighbour's (``claude-opus-4-9`` is not
    ``claude-opus-4``)."""
    return find(model, prices)


def find(model: str, table: Mapping[str, T]) -> T | None:
    """``model``'s entry in ``table`` (prices here, capabilities in
    :mod:`jpfs.core.models`): by its name, an alias the API takes, or a dated snapshot's
    model name; None, never a neighbour's, for a name not there."""
    for name in (model, ALIASES.get(model, "")):
        if name in table:
            return table[name]
    dated = _DATED.fullmatch(model)
    if dated is not None and dated.group(1) != model:
        return find(dated.group(1), table)
    return None


def billed_as(served: str, asked: str, prices: Mapping[str, Price]) -> str:
    """The name a call is priced by: the model the server says it ran (``served``), or
    when that has no price and is the ``asked`` model under a gateway's prefix
    (``openai/gpt-4.1-mini`` for ``gpt-4.1-mini``), the asked one if it has a price. Not
    whatever was asked: a proxy that routes a name to another model says so by naming
    that model, and pricing it as the name asked for would be a guess. A call priced by
    neither stays under the served name, which a price added later then prices."""
    if not served:
        return asked
    gateway = bool(asked) and served.endswith("/" + asked)
    if gateway and price_of(served, prices) is None and price_of(asked, prices) is not None:
        return asked
    return served


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
