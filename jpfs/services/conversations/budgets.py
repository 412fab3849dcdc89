"""Budgets: the most a conversation and all its descendants may spend.

    [limits]
    budget_tokens = 200000    # the four usage counts summed, over the subtree
    budget_usd = 0.50         # cost_usd summed over the subtree (jpfs.core.prices)

A conversation's budget comes from its ``[config]`` snapshot: its profile's, or a
smaller one its caller gave it (``jp_query`` / ``fork`` / ``jpfs query`` options),
never a larger one than the caller has left. Before every model call a run checks its
own conversation and every ancestor that has a budget (:func:`check`); a budget
spent stops the run with a :class:`~jpfs.errors.BudgetError` naming the budget, the
conversation that holds it and the figures. The spending is read from the record
(:mod:`jpfs.core.usage`), so a budget holds across processes, restarts and machines
that share the record. A call may overshoot by its own size: the check is before it.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jpfs.core import ids, prices
from jpfs.core.conversation import Conversation
from jpfs.core.usage import Spend, dollars
from jpfs.core.workspace import Workspace
from jpfs.errors import ArgumentError, BudgetError, Cancelled, FormatError, LimitError
from jpfs.services.conversations import runs, steering

if TYPE_CHECKING:
    from jpfs.infra.providers.base import Reply

KEYS = ("budget_tokens", "budget_usd")


@dataclass(frozen=True)
class Budget:
    holder: str  # the conversation whose subtree it bounds
    tokens: int | None
    usd: float | None


def applying(ws: Workspace, conv: Conversation) -> list[Budget]:
    """The budgets that bound ``conv``: its own and its ancestors', nearest first."""
    out = []
    for holder in [conv.id, *ids.ancestors(conv.id)]:
        handle = conv if holder == conv.id else Conversation(ws.conv_root, holder)
        try:
            limits = handle.settings.limits
        except FormatError:
            continue  # an ancestor's broken conversation.toml is its own problem
        if limits.budget_tokens is not None or limits.budget_usd is not None:
            out.append(Budget(holder, limits.budget_tokens, limits.budget_usd))
    return out


def check(
    ws: Workspace, conv: Conversation, model: str, budgets: list[Budget] | None = None
) -> None:
    """Refuse the next model call of ``conv`` (on ``model``) if a budget is spent.
    ``budgets``: :func:`applying`'s answer, when the caller keeps it (a run does)."""
    for budget in applying(ws, conv) if budgets is None else budgets:
        spent = ws.spending.subtree(budget.holder)
        whose = _whose(budget.holder, conv.id)
        if budget.tokens is not None and spent.tokens >= budget.tokens:
            raise BudgetError(
                f"budget spent: {whose} used {spent.tokens:,} tokens of budget_tokens ="
                f" {budget.tokens:,} ({spent.text()}); no further model call."
                + _going_on(budget.holder, conv.id, "budget_tokens")
            )
        if budget.usd is None:
            continue
        if spent.unpriced_models or prices.price_of(model, ws.spending.table) is None:
            missing = spent.unpriced_models or [model]
            raise BudgetError(
                f"budget_usd = {budget.usd:g} cannot be kept: {prices.no_price(missing[0])}"
            )
        if spent.cost_usd >= budget.usd:
            raise BudgetError(
                f"budget spent: {whose} cost {dollars(spent.cost_usd)} of budget_usd ="
                f" {budget.usd:g} ({spent.text()}); no further model call."
                + _going_on(budget.holder, conv.id, "budget_usd")
            )


def tightest(ws: Workspace, budgets: list[Budget]) -> tuple[float | None, str]:
    """The largest share spent of any of ``budgets``, and that budget in words."""
    best: tuple[float | None, str] = (None, "")
    for budget in budgets:
        spent = ws.spending.subtree(budget.holder)
        shares = []
        if budget.tokens:
            shares.append(
                (spent.tokens / budget.tokens,
                 f"budget_tokens = {budget.tokens:,} of {budget.holder}: {spent.tokens:,} spent")
            )  # fmt: skip
        if budget.usd:
            shares.append(
                (spent.cost_usd / budget.usd,
                 f"budget_usd = {budget.usd:g} of {budget.holder}: {dollars(spent.cost_usd)} spent")
            )  # fmt: skip
        for share, what in shares:
            if best[0] is None or share > best[0]:
                best = (share, what)
    return best


def _going_on(holder: str, conv_id: str, key: str) -> str:
    return (
        f" To go on: raise limits.{key} in {holder}/conversation.toml ([config.limits];"
        f" in its profile too, if that is the profile's limit), then give {conv_id}"
        f" new input or `jpfs retry {conv_id}`"
    )


def _whose(holder: str, conv_id: str) -> str:
    if holder == conv_id:
        return f"{conv_id} (with its descendants)"
    return f"{holder} (whose subtree holds {conv_id})"


def left(ws: Workspace, conv: Conversation) -> tuple[int | None, float | None]:
    """What ``conv`` may still spend under every budget that bounds it (None: no bound)."""
    tokens: int | None = None
    usd: float | None = None
    for budget in applying(ws, conv):
        spent = ws.spending.subtree(budget.holder)
        if budget.tokens is not None:
            room = max(budget.tokens - spent.tokens, 0)
            tokens = room if tokens is None else min(tokens, room)
        if budget.usd is not None:
            room_usd = max(budget.usd - spent.cost_usd, 0.0)
            usd = room_usd if usd is None else min(usd, room_usd)
    return tokens, usd


def for_child(
    ws: Workspace,
    caller: Conversation | None,
    config: dict[str, Any],
    tokens: int | None = None,
    usd: float | None = None,
) -> dict[str, Any]:
    """``config`` (a new child's) with the budget its caller gives it: at most the
    child's profile allows, and never more than the caller has left."""
    if tokens is None and usd is None:
        return config
    if tokens is not None and (isinstance(tokens, bool) or tokens <= 0):
        # Worded as the tools' schema check words it (jpfs.core.tool.check_arguments).
        raise ArgumentError(f"argument 'budget_tokens' must be at least 1, got {tokens!r}")
    if usd is not None and (isinstance(usd, bool) or not math.isfinite(usd) or usd <= 0):
        raise ArgumentError(f"argument 'budget_usd' must be greater than 0, got {usd!r}")
    if caller is not None:
        room_tokens, room_usd = left(ws, caller)
        if tokens is not None and room_tokens is not None and tokens > room_tokens:
            raise LimitError(
                f"budget_tokens = {tokens:,} is more than {caller.id} has left"
                f" ({room_tokens:,} tokens)"
            )
        if usd is not None and room_usd is not None and usd > room_usd + 1e-9:
            raise LimitError(
                f"budget_usd = {usd:g} is more than {caller.id} has left ({dollars(room_usd)})"
            )
    limits = dict(config.get("limits") or {})
    for key, given in (("budget_tokens", tokens), ("budget_usd", usd)):
        if given is None:
            continue
        own = limits.get(key)
        limits[key] = given if own is None else min(own, given)
    return {**config, "limits": limits}


@dataclass
class RunLimits:
    """What the runs of one runner may still spend: each run's clock
    (``limits.max_run_seconds``) and what its subtree had spent when it began."""

    ws: Workspace
    _clocks: dict[str, tuple[float, float]] = field(default_factory=dict)  # deadline, limit
    _before: dict[str, Spend] = field(default_factory=dict)
    # The budgets that bound each run's conversation: snapshots never change, so they are
    # read once per run, not before every call.
    _budgets: dict[str, list[Budget]] = field(default_factory=dict)
    _runs: set[str] = field(default_factory=set)

    @contextlib.contextmanager
    def running(self, conv: Conversation) -> Iterator[None]:
        """Around one run of ``conv``: its clock starts, and its spending is counted
        (for a sub-agent, whose status mail says what the run cost)."""
        self._runs.add(conv.id)
        if ids.parent(conv.id) is not None:
            self._before[conv.id] = self.ws.spending.subtree(conv.id)
        limit = conv.settings.limits.max_run_seconds
        if limit is not None:
            self._clocks[conv.id] = (time.monotonic() + limit, limit)
        try:
            yield
        finally:
            self._clocks.pop(conv.id, None)
            self._before.pop(conv.id, None)
            self._budgets.pop(conv.id, None)
            self._runs.discard(conv.id)

    def check_clock(self, conv: Conversation) -> None:
        """Stop a run whose ``limits.max_run_seconds`` has passed."""
        clock = self._clocks.get(conv.id)
        if clock is not None and time.monotonic() >= clock[0]:
            raise BudgetError(f"run time spent: max_run_seconds = {clock[1]:g} reached")

    def call(
        self,
        conv: Conversation,
        model: str,
        cancel: threading.Event,
        complete: Callable[[threading.Event], Reply],
    ) -> Reply:
        """One model call of ``conv``: refused when a budget or the run's time is spent,
        and cut at the run's deadline (``complete`` gets the event to stop by)."""
        check(self.ws, conv, model, self._applying(conv))
        clock = self._clocks.get(conv.id)
        if clock is None:
            return complete(cancel)
        self.check_clock(conv)
        deadline, limit = clock
        with runs.cancelled_at(cancel, deadline) as call_cancel:
            try:
                return complete(call_cancel)
            except Cancelled:
                if cancel.is_set() or time.monotonic() < deadline:
                    raise
        raise BudgetError(
            f"run time spent: max_run_seconds = {limit:g} reached during a model call"
        )

    def figures(self, conv: Conversation, calls_left: int | None) -> steering.Figures:
        """Where ``conv``'s run stands, for jpfs's notes to it (steering): the tightest
        budget over it, its clock, the model calls left."""
        share, what = tightest(self.ws, self._applying(conv))
        clock = self._clocks.get(conv.id)
        clock_share = None
        if clock is not None:
            deadline, limit = clock
            clock_share = 1.0 - max(deadline - time.monotonic(), 0.0) / limit
        return steering.Figures(
            budget_share=share,
            budget=what,
            clock_share=clock_share,
            clock_limit=clock[1] if clock is not None else 0.0,
            calls_left=calls_left,
        )

    def _applying(self, conv: Conversation) -> list[Budget]:
        """:func:`applying`, read once a run (its snapshot is final within it), for the
        notes before a call and the check in it alike."""
        budgets = self._budgets.get(conv.id)
        if budgets is None:
            budgets = applying(self.ws, conv)
            if conv.id in self._runs and conv.config:
                self._budgets[conv.id] = budgets
        return budgets

    def usage(self, conv: Conversation) -> dict[str, Any]:
        """What ``conv``'s subtree spent since its current run began, as JSON for the
        status mail: the five keys, no note (an agent reads it, and pays for every word)."""
        before = self._before.get(conv.id, Spend())
        return self.ws.spending.subtree(conv.id).since(before).to_json(explain=False)
