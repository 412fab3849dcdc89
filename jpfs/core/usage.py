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
:class:`Book` keeps what it read per conversation and reads only new event files on
each look (event files are never rewritten), so a budget checked before every model
call costs a few ``stat`` calls per conversation of the subtree.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jpfs.core import frontmatter, prices, tree
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


@dataclass(frozen=True)
class Spend:
    """Usage summed over calls, and their cost. ``cost_usd`` sums the priced calls;
    ``unpriced`` names the models of calls that had no price (then the total cost is
    unknown, and :meth:`to_json` says ``null`` and why)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0
    unpriced: frozenset[str] = frozenset()
    unpriced_calls: int = 0

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
    def cost(self) -> float | None:
        return None if self.unpriced else self.cost_usd

    def __add__(self, other: Spend) -> Spend:
        return Spend(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
            round(self.cost_usd + other.cost_usd, 6),
            self.calls + other.calls,
            self.unpriced | other.unpriced,
            self.unpriced_calls + other.unpriced_calls,
        )

    def since(self, before: Spend) -> Spend:
        """What was spent after ``before`` was read (a run's own spending)."""
        return Spend(
            self.input_tokens - before.input_tokens,
            self.output_tokens - before.output_tokens,
            self.cache_read_input_tokens - before.cache_read_input_tokens,
            self.cache_creation_input_tokens - before.cache_creation_input_tokens,
            round(self.cost_usd - before.cost_usd, 6),
            self.calls - before.calls,
            # Which models of the calls since: those of all calls, if any was unpriced.
            self.unpriced if self.unpriced_calls > before.unpriced_calls else frozenset(),
            self.unpriced_calls - before.unpriced_calls,
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
            unpriced = sorted(self.unpriced)
            out["cost_note"] = prices.no_price(unpriced[0]) if unpriced else None
        return out

    def text(self) -> str:
        """One line for people: tokens and dollars."""
        cost = "$?" if self.unpriced else dollars(self.cost_usd)
        return (
            f"{self.tokens} tokens (input {self.input_tokens}, output {self.output_tokens},"
            f" cache read {self.cache_read_input_tokens}, cache write"
            f" {self.cache_creation_input_tokens}), {cost}"
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
    unpriced: frozenset[str] = frozenset()
    if isinstance(cost, bool) or not isinstance(cost, int | float):
        # Recorded before costs were kept, or with no price then: priced now if it can be.
        cost = prices.cost_of(Usage(*counts), model, table)
        if cost is None:
            cost, unpriced = 0.0, frozenset({model or "(unnamed model)"})
    return Spend(
        input_tokens=counts[0],
        output_tokens=counts[1],
        cache_read_input_tokens=counts[2],
        cache_creation_input_tokens=counts[3],
        cost_usd=float(cost),
        calls=1,
        unpriced=unpriced,
        unpriced_calls=1 if unpriced else 0,
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
        data = tomllib.loads(text) if text is not None else {}
    except (FormatError, OSError, tomllib.TOMLDecodeError):
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
    conv: Conversation, step: str, model: str, usage: Usage, table: Mapping[str, prices.Price]
) -> None:
    """Record a call that is no event (an onboarding step) in ``usage.toml``."""
    import tomlkit

    entry = {
        "at": dt.datetime.now(dt.UTC).replace(microsecond=0),
        "step": step,
        "model": model,
        **record(usage, model, table),
    }
    block = tomlkit.dumps({"call": [entry]})
    old = conv.read(LEDGER) or "# Model calls of this conversation that are not events (jpfs).\n"
    conv.write(LEDGER, old.rstrip("\n") + "\n\n" + block)


@dataclass
class _Seen:
    """What a :class:`Book` has read of one conversation."""

    handle: Conversation
    skip: int  # events copied from a fork's source
    seq: int = 0  # the last event counted
    events: Spend = field(default_factory=Spend)
    ledger_stamp: tuple[int, int, int] | None = None
    ledger: Spend = field(default_factory=Spend)


class Book:
    """Spending per conversation, kept between looks (one per process or view);
    thread-safe: the runs of a daemon share one."""

    def __init__(self, conv_root: Path, table: Mapping[str, prices.Price]) -> None:
        self.conv_root = conv_root
        self.table = table
        self._seen: dict[str, _Seen] = {}
        self._lock = threading.RLock()

    def of(self, conv_id: str) -> Spend:
        """What ``conv_id`` itself spent (its own calls, not its descendants')."""
        with self._lock:
            return self._of(conv_id)

    def _of(self, conv_id: str) -> Spend:
        seen = self._seen.get(conv_id)
        if seen is None:
            seen = self._start(conv_id)
        names = seen.handle.event_names()
        if (names and names[-1][0] < seen.seq) or (not names and seen.seq):
            seen = self._start(conv_id)  # removed and made again, or renumbered
        for seq, role, name in names:
            if seq <= seen.seq:
                continue
            if role == "assistant" and seq > seen.skip:
                call = event_call(seen.handle, seq, name, self.table)
                if call is None and seq == names[-1][0]:
                    break  # the newest, maybe half-written: read again next time
                if call is not None:
                    seen.events = seen.events + call.spend
            seen.seq = seq
        stamp = _stamp(seen.handle.path / LEDGER)
        if stamp != seen.ledger_stamp:
            total = Spend()
            for call in ledger_calls(seen.handle, self.table):
                total = total + call.spend
            seen.ledger, seen.ledger_stamp = total, stamp
        return seen.events + seen.ledger

    def subtree(self, conv_id: str) -> Spend:
        """What ``conv_id`` and all its descendants spent."""
        with self._lock:
            total = self._of(conv_id)
            for child in tree.walk(self.conv_root, conv_id):
                total = total + self._of(child)
            return total

    def _start(self, conv_id: str) -> _Seen:
        handle = Conversation(self.conv_root, conv_id)
        try:
            skip = inherited(handle.meta())
        except FormatError:
            skip = 0
        seen = _Seen(handle, skip)
        self._seen[conv_id] = seen
        return seen


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)
