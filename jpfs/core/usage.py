"""What conversations spent, read from the record: per call, per conversation, per subtree.

Every model call leaves its usage in the record, in one of two places:

    events/NNNN-assistant.md   a work turn: ``[usage]`` in its front matter
    usage.toml                 the calls that are no event: onboarding steps, one
                               ``[[call]]`` each (``at``, ``step``, ``model`` and usage)

``[usage]`` holds the provider's four counts (``input_tokens``, ``output_tokens``,
``cache_read_input_tokens``, ``cache_creation_input_tokens``; input excludes the cache)
and ``cost_usd``, priced when the call was recorded (:mod:`jpfs.core.prices`); a call
whose model had no price has no ``cost_usd``. A fork's copy of its source's events is
not its own spending: ``inherited_events = N`` in its conversation.toml says the first
N events were copied, and they are not counted again.

Because the spending is in the files of the record, every process and every machine
sharing the record reads the same sums; that is what makes a budget hold across them.
:mod:`jpfs.core.ledger` keeps the sums per conversation and per subtree.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from jpfs.core import frontmatter, prices
from jpfs.core.conversation import Conversation
from jpfs.errors import FormatError
from jpfs.infra.providers.base import Usage

LEDGER = "usage.toml"
COUNTS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)


Unpriced = tuple[tuple[str, int], ...]  # (model, calls) of calls with no price, sorted


def _combine(a: Unpriced, b: Unpriced, sign: int = 1) -> Unpriced:
    counts = dict(a)
    for model, calls in b:
        counts[model] = counts.get(model, 0) + sign * calls
    # Negative counts stay: a difference (what a removal takes away) must add back exactly.
    return tuple(sorted((m, c) for m, c in counts.items() if c != 0))


@dataclass(frozen=True)
class Spend:
    """Usage summed over calls, and their cost. ``cost_usd`` sums the priced calls;
    ``unpriced`` counts the calls per model that had no price (then the total cost is
    unknown, and :meth:`to_json` says ``null`` and why). Sums subtract exactly
    (:meth:`since`), so a running total can be kept by adding and removing parts."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0
    unpriced: Unpriced = ()

    @property
    def tokens(self) -> int:
        """The four counts summed: what ``budget_tokens`` bounds."""
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_input_tokens
            + self.cache_creation_input_tokens
        )

    @property
    def unpriced_models(self) -> list[str]:
        return [model for model, calls in self.unpriced if calls > 0]

    @property
    def cost(self) -> float | None:
        return None if self.unpriced_models else self.cost_usd

    def __add__(self, other: Spend) -> Spend:
        return self._with(other, 1)

    def since(self, before: Spend) -> Spend:
        """What was spent after ``before`` was read (a run's own spending)."""
        return self._with(before, -1)

    def _with(self, other: Spend, sign: int) -> Spend:
        return Spend(
            self.input_tokens + sign * other.input_tokens,
            self.output_tokens + sign * other.output_tokens,
            self.cache_read_input_tokens + sign * other.cache_read_input_tokens,
            self.cache_creation_input_tokens + sign * other.cache_creation_input_tokens,
            round(self.cost_usd + sign * other.cost_usd, 6),
            self.calls + sign * other.calls,
            _combine(self.unpriced, other.unpriced, sign),
        )

    def to_json(self, *, explain: bool = True) -> dict[str, Any]:
        """The four counts and ``cost_usd`` (None when unknown); with ``explain``, a
        ``cost_note`` saying why it is unknown (None when it is known)."""
        out: dict[str, Any] = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cost_usd": self.cost,
        }
        if explain:
            models = self.unpriced_models
            out["cost_note"] = prices.no_price(models[0]) if models else None
        return out

    def text(self) -> str:
        """One line for people: tokens and dollars."""
        return (
            f"{self.tokens} tokens (input {self.input_tokens}, output {self.output_tokens},"
            f" cache read {self.cache_read_input_tokens}, cache write"
            f" {self.cache_creation_input_tokens}), {dollars(self.cost)}"
        )


def dollars(value: float | None) -> str:
    if value is None:
        return "$?"
    return f"${value:.4f}" if value < 1 else f"${value:,.2f}"


def record(usage: Usage, model: str, table: Mapping[str, prices.Price]) -> dict[str, Any]:
    """The ``[usage]`` table kept on an event (or a ``[[call]]`` of usage.toml)."""
    out: dict[str, Any] = dict(usage.counts())
    cost = prices.cost_of(usage, model, table)
    if cost is not None:
        out["cost_usd"] = cost
    return out


@dataclass(frozen=True)
class Call:
    """One model call found in the record."""

    conversation: str
    at: dt.datetime | None
    model: str
    step: str  # "event 0004" or "onboarding round 1"
    spend: Spend


def _spend(data: Mapping[str, Any], model: str, table: Mapping[str, prices.Price]) -> Spend:
    counts = [_count(data.get(k)) for k in COUNTS]
    cost = data.get("cost_usd")
    unpriced: Unpriced = ()
    if isinstance(cost, bool) or not isinstance(cost, int | float) or not 0 <= cost < math.inf:
        # Recorded before costs were kept, or with no price then: priced now if it can be.
        cost = prices.cost_of(Usage(*counts), model, table)
        if cost is None:
            cost, unpriced = 0.0, ((model or "(unnamed model)", 1),)
    return Spend(
        input_tokens=counts[0],
        output_tokens=counts[1],
        cache_read_input_tokens=counts[2],
        cache_creation_input_tokens=counts[3],
        cost_usd=float(cost),
        calls=1,
        unpriced=unpriced,
    )


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def inherited(meta: Mapping[str, Any]) -> int:
    value = meta.get("inherited_events", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def event_call(
    conv: Conversation, seq: int, name: str, table: Mapping[str, prices.Price]
) -> Call | None:
    try:
        meta, _ = frontmatter.read(conv.events_dir / name, conv.root)
    except (FormatError, OSError):
        return None  # being written, or broken: the transcript reader says so
    usage = meta.get("usage")
    if not isinstance(usage, dict):
        return None
    created = meta.get("created")
    model = str(meta.get("model") or "")
    at = created if isinstance(created, dt.datetime) else None
    return Call(conv.id, at, model, f"event {seq:04d}", _spend(usage, model, table))


def ledger_calls(conv: Conversation, table: Mapping[str, prices.Price]) -> list[Call]:
    """The calls recorded in ``usage.toml`` (none when it is missing or unreadable)."""
    try:
        text = conv.read(LEDGER)
        data = frontmatter.loads(text, LEDGER) if text is not None else {}
    except (FormatError, OSError):
        return []
    out = []
    for item in data.get("call") or []:
        if not isinstance(item, dict):
            continue
        model = str(item.get("model") or "")
        at = item.get("at") if isinstance(item.get("at"), dt.datetime) else None
        out.append(Call(conv.id, at, model, str(item.get("step", "")), _spend(item, model, table)))
    return out


def calls(conv: Conversation, table: Mapping[str, prices.Price]) -> Iterator[Call]:
    """Every model call ``conv`` itself made, as the record holds them."""
    try:
        skip = inherited(conv.meta())
    except FormatError:
        skip = 0
    yield from ledger_calls(conv, table)
    for seq, role, name in conv.event_names():
        if role == "assistant" and seq > skip:
            call = event_call(conv, seq, name, table)
            if call is not None:
                yield call


def append_call(
    conv: Conversation,
    step: str,
    model: str,
    usage: Usage,
    table: Mapping[str, prices.Price],
    priced_as: str | None = None,
) -> None:
    """Record a call that is no event (an onboarding step) in ``usage.toml``;
    ``priced_as``: the name it is priced by, when not ``model`` (:func:`prices.billed_as`)."""
    import tomlkit

    entry = {
        "at": dt.datetime.now(dt.UTC).replace(microsecond=0),
        "step": step,
        "model": model,
        **record(usage, priced_as or model, table),
    }
    block = tomlkit.dumps({"call": [entry]})
    old = conv.read(LEDGER) or "# Model calls of this conversation that are not events (jpfs).\n"
    conv.write(LEDGER, old.rstrip("\n") + "\n\n" + block)
