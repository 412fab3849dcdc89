"""``query``: give a conversation input and run it until its caller must act.

The one implementation behind ``jpfs query``, the ``jp_query`` tool, the MCP server
and the library's ``call``. Input means different things in different states:

    empty     the input becomes task.md
    waiting   the input becomes the answers round for the last questions
    idle      the input becomes the next user event (the conversation continues)
    failed    the same, and the status goes back to active (a retry with news)
    killed    refused: killed conversations are not resumed by accident
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jpfs.core import ids, locks, scope, tree
from jpfs.core.conversation import RESULT, Conversation
from jpfs.core.state import AGENT_ACTS, State
from jpfs.core.usage import Spend
from jpfs.core.workspace import Workspace
from jpfs.errors import StateError
from jpfs.services.conversations import budgets, creation, inputs, lifecycle, onboarding
from jpfs.services.run.handoff import Outcome as Outcome  # its home: the client needs it light
from jpfs.services.run.handoff import QueryRequest
from jpfs.services.run.runtime import Runner

if TYPE_CHECKING:
    pass

# Seconds a query waits for the lock of a conversation that has nothing to run (the
# holder is only looking at it); a conversation whose agent is at work is busy at once.
SETTLE_WAIT = 5.0


def outcome(conv: Conversation, state: State) -> Outcome:
    if state is State.WAITING:
        return Outcome(conv.id, state, onboarding.questions_of_round(conv))
    if state is State.FAILED:
        last = conv.last_event()
        text = last.body if last is not None and last.role == "error" else "the run failed"
        return Outcome(conv.id, state, text)
    if state is State.KILLED:
        return Outcome(conv.id, state, f"conversation {conv.id} was killed")
    from jpfs.core import frontmatter

    result = conv.read(RESULT)
    text = frontmatter.parse(result)[1] if result else ""
    return Outcome(conv.id, state, text)


@dataclass(frozen=True)
class Query:
    """What :func:`run` is asked: ``text`` for a conversation, a new one (no
    ``conv_id``) or one that goes on."""

    text: str | None
    conv_id: str | None = None  # the conversation to go on with (None: a new one)
    within: str | None = None  # ``conv_id`` is resolved inside this subtree
    activate: bool = False
    # Who asks (and wrote ``text``): the user, a calling agent, a caller confined to a
    # subtree; it says who checks a new conversation's agent (creation.authorize).
    actor: creation.Actor = creation.USER
    # A new conversation: where, with which agent, and how.
    parent: str | None = None
    segment: str | None = None
    agent: str | None = None
    overrides: Sequence[str] = ()
    onboarding_enabled: bool | None = None
    hidden: bool = False
    tmp: dt.timedelta | None = None
    extra: Mapping[str, object] | None = None
    # Its budget: at most what ``parent`` has left (budgets.for_child).
    budget_tokens: int | None = None
    budget_usd: float | None = None
    # Its configuration, when the caller built it already from ``agent``'s profile
    # (with ``overrides`` and ``onboarding_enabled``): not built again.
    config: Mapping[str, Any] | None = None


def query(
    ws: Workspace,
    text: str | None,
    *,
    runner: Runner | None = None,
    on_text: Callable[[str | None], None] | None = None,
    **fields: Any,
) -> Outcome:
    """:func:`run` of ``Query(text, **fields)``: the keyword form, for callers that name
    a few of its fields (the library, scripts, tests)."""
    return run(ws, Query(text, **fields), runner=runner, on_text=on_text)


def run(
    ws: Workspace,
    request: Query,
    *,
    runner: Runner | None = None,
    on_text: Callable[[str | None], None] | None = None,
) -> Outcome:
    """Create (no ``conv_id``) or continue a conversation with ``request.text`` and run it.

    ``on_text`` gets the text of its work turns as the provider streams it (``None``
    when a turn begins); its sub-agents' turns are not streamed. A budget is a new
    conversation's, at most what its parent has left
    (:func:`jpfs.services.conversations.budgets.for_child`)."""
    runner = runner or Runner(ws)
    text, conv_id, parent, agent = request.text, request.conv_id, request.parent, request.agent
    config = request.config
    budgeted = request.budget_tokens is not None or request.budget_usd is not None
    if conv_id is None:
        if parent is not None:
            parent = scope.resolve(ws.conv_root, parent)
        target = ids.join(parent, request.segment or ids.generate())
        if budgeted:
            # Checked before its config is built (and again as it is created).
            name = agent or ws.config.default_agent
            creation.authorize(ws, request.actor, name, parent)
            caller = Conversation(ws.conv_root, parent) if parent is not None else None
            base = dict(config) if config is not None else None
            if base is None:
                base = lifecycle.agent_config(
                    ws, name, request.overrides, request.onboarding_enabled
                )
            config = budgets.for_child(ws, caller, base, request.budget_tokens, request.budget_usd)
    else:
        if budgeted:
            raise StateError(
                "a budget is given when a conversation is created; "
                f"{conv_id} exists (its budget is in its conversation.toml)"
            )
        target = scope.resolve(ws.conv_root, conv_id, within=request.within)
    # The lock covers the input too: a daemon must not start the run between the
    # input being written and this caller running it.
    wait = runner.lock_wait
    if conv_id is not None and wait < SETTLE_WAIT:
        state = tree.state_of(Conversation(ws.conv_root, target))
        if state not in AGENT_ACTS:
            # Nobody's run has work to do: whoever holds the lock (a daemon looking at
            # the run that just ended) lets go in a moment. A query right after another
            # waits for that instead of failing as busy.
            wait = SETTLE_WAIT
    with (
        locks.conversation_lock(ws.local_dir, target, wait=wait),
        runner.app.claims.claimed(ws, target),
    ):
        if conv_id is None:
            conv = lifecycle.new_conversation(
                ws,
                target,
                agent=agent,
                title=lifecycle.title_of(text),
                hidden=request.hidden,
                tmp=request.tmp,
                activate=request.activate,
                overrides=request.overrides,
                onboarding=request.onboarding_enabled,
                task=text or "",
                config=None if config is None else dict(config),
                from_profile=config is not None and not budgeted,
                extra=dict(request.extra or {}),
                actor=request.actor,
                locked=True,
            )
        else:
            conv = Conversation(ws.conv_root, target)
            if text:
                inputs.submit(ws, conv, text, author=request.actor.author)
            if request.activate:
                lifecycle.set_active(ws, conv.id)
        if on_text is not None:
            runner.streams[conv.id] = on_text
        before = ws.spending.subtree(conv.id) if conv_id is not None else Spend()
        try:
            state = runner.run_locked(conv)
        finally:
            runner.streams.pop(conv.id, None)
    result = outcome(conv, state)
    return dataclasses.replace(result, usage=ws.spending.subtree(conv.id).since(before).to_json())


def run_request(
    ws: Workspace,
    request: QueryRequest,
    runner_for: Callable[[str], Runner],
    *,
    on_text: Callable[[str | None], None] | None = None,
) -> Outcome:
    """One ``jpfs query`` run, in this process or in a daemon it was handed to.

    Without ``conv_id`` or ``new``, continues the active conversation (within
    ``root_id`` when given), else starts one. ``runner_for(target)`` makes the runner,
    once the conversation is known. The provider is built before anything is
    written, so what it lacks (``ANTHROPIC_API_KEY``) is an error, not a failed
    conversation."""
    within = scope.resolve(ws.conv_root, request.root_id) if request.root_id is not None else None
    # Under --root-id the caller is confined to a subtree, and its tool checked the
    # agent against its own list; else it is the user, held to agents.allowed.
    actor = creation.USER if within is None else creation.agent_actor()
    conv_id = request.conv_id
    if conv_id is None and not request.new:
        active = lifecycle.get_active(ws)
        if active is not None and (within is None or active.startswith(within + "/")):
            conv_id = active
    segment = ids.generate()
    config: Mapping[str, Any]
    if conv_id is not None:
        target = scope.resolve(ws.conv_root, conv_id, within=within)
        if request.onboard is False:
            lifecycle.skip_onboarding(ws, Conversation(ws.conv_root, target))
        config = dict(Conversation(ws.conv_root, target).config)
    else:
        target = ids.join(within, segment)
        agent = request.agent or ws.config.default_agent
        # Before the provider is built: a profile that is off says so, not that its
        # key is missing.
        creation.authorize(ws, actor, agent, None)
        config = lifecycle.agent_config(ws, agent, (), request.onboard)
    tmp = lifecycle.parse_duration(request.tmp) if request.tmp else None
    runner = runner_for(target)
    if config:
        runner.provider(config)
    if conv_id is not None:
        going_on = Query(
            request.text,
            conv_id=conv_id,
            within=within,
            budget_tokens=request.budget_tokens,
            budget_usd=request.budget_usd,
        )
        return run(ws, going_on, runner=runner, on_text=on_text)
    new = Query(
        request.text,
        parent=within,
        segment=segment,
        agent=request.agent,
        onboarding_enabled=request.onboard,
        hidden=request.hidden,
        tmp=tmp,
        activate=request.activate,
        budget_tokens=request.budget_tokens,
        budget_usd=request.budget_usd,
        actor=actor,
        config=config,
    )
    return run(ws, new, runner=runner, on_text=on_text)
