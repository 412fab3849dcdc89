"""The agent runner: drives one conversation from its files until the caller must act.

The loop is level-triggered: each step re-derives the state from the files
(:func:`jpfs.core.state.derive`), does one thing, writes its files and commits. A crash
between steps loses nothing and repeats nothing: a committed model reply is never
requested again, and only tool calls without a result event are (re)run.

    onboarding -> ask_caller / start_work        (jpfs.services.conversations.onboarding)
    running    -> first user event | pending tool calls | one model turn
    finishing  -> result.md (+ status mail to the caller)
    waiting / idle / failed / killed -> return: someone else acts
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from jpfs.core import frontmatter, locks, messages, prices, record, tree, usage
from jpfs.core.conversation import RESULT, Conversation, Event, now
from jpfs.core.record import agent_identity
from jpfs.core.state import State
from jpfs.core.tool import Tool, ToolContext, call_tool
from jpfs.core.workspace import Workspace
from jpfs.errors import (
    Cancelled,
    FormatError,
    Interrupted,
    LimitError,
    ProfileError,
    ProviderError,
)
from jpfs.infra import providers
from jpfs.infra.providers.base import Provider, Reply, Request
from jpfs.services.conversations import (
    budgets,
    inputs,
    lifecycle,
    mail,
    onboarding,
    reports,
    steering,
)
from jpfs.services.run import turn
from jpfs.services.run.app import App
from jpfs.services.run.hooks import Hooks
from jpfs.services.run.recording import Recorder
from jpfs.services.workspace import policy

log = logging.getLogger("jpfs.services.run.runtime")

Progress = Callable[[str], None]
Meta = Mapping[str, Any] | None


@dataclass
class Runner:
    """Runs conversations of one workspace. Thread-safe; one instance may run many.

    Its events and commits (``record_event``, ``commit``, ``commit_caller_edits``) are
    its ``recorder``'s (:class:`~jpfs.services.run.recording.Recorder`); what its owner
    adds to the loop (the daemon's stop between steps, its counts) comes as ``hooks``
    (:class:`~jpfs.services.run.hooks.Hooks`), never as a subclass."""

    ws: Workspace
    cancel: threading.Event = field(default_factory=threading.Event)
    progress: Progress | None = None
    lock_wait: float = 0.0
    providers: dict[str, Provider] = field(default_factory=dict)
    # Hook for the lifecycle layer: called after result.md is written (status mail).
    on_finish: Callable[[Runner, Conversation, bool, str], None] | None = field(
        default=reports.report_status
    )
    # conversation id -> where its work turns' text goes as it arrives (``jpfs query``
    # showing the answer live); None marks the start of a turn.
    streams: dict[str, Callable[[str | None], None]] = field(default_factory=dict)
    # The process's tools, runs, sync engines (jpfs.services.run.app); without one, an
    # empty App of its own (no tools).
    app: App = field(default_factory=App)
    hooks: Hooks = field(default_factory=Hooks)
    # Its runs' events and commits; by default one of its own, calling hooks.after_commit.
    recorder: Recorder | None = None
    _append_lock: threading.Lock = field(default_factory=threading.Lock)
    # Each run's clock and spending (limits.max_run_seconds, budgets, the run's usage).
    limits: budgets.RunLimits = field(init=False)

    def __post_init__(self) -> None:
        self.limits = budgets.RunLimits(self.ws)
        if self.recorder is None:
            self.recorder = Recorder(self.ws, self.hooks.after_commit)

    # -- plumbing -------------------------------------------------------------------
    @property
    def recording(self) -> Recorder:
        assert self.recorder is not None  # set by __post_init__
        return self.recorder

    def note(self, text: str) -> None:
        self.hooks.note(text)
        if self.progress is not None:
            self.progress(text)

    # Its recorder's (jpfs.services.run.recording.Recorder), for the services it runs.
    def record_event(
        self, conv: Conversation, role: str, body: str, meta: Meta = None, *, event: str, **kw: Any
    ) -> Event:
        return self.recording.record_event(conv, role, body, meta, event=event, **kw)

    def commit(self, conv: Conversation, event: str, **kwargs: Any) -> None:
        self.recording.commit(conv, event, **kwargs)

    def commit_caller_edits(self, conv: Conversation) -> None:
        self.recording.commit_caller_edits(conv)

    def provider(self, config: Mapping[str, Any]) -> Provider:
        key = providers.key(config)
        if key not in self.providers:
            self.providers[key] = providers.make(config)
        return self.providers[key]

    def complete(self, conv: Conversation, request: Request) -> Reply:
        self.hooks.before_call(conv)
        reply = self._complete(conv, request)
        self.hooks.after_call(conv, reply)
        return reply

    def _complete(self, conv: Conversation, request: Request) -> Reply:
        if self.cancel.is_set():
            raise Cancelled(f"run of {conv.id} cancelled")
        sink = self.streams.get(conv.id)
        if sink is not None and request.phase == "work" and request.on_text is None:
            sink(None)  # a new turn begins
            request = dataclasses.replace(request, on_text=sink)
        if request.notify is None:
            request = dataclasses.replace(
                request, notify=lambda text: self.note(f"[{conv.id}] {text}")
            )
        if not conv.settings.prompt_cache:
            request = dataclasses.replace(request, cache=False)
        # Every model call passes here: budgets and the run's clock are checked once, in
        # one place, whichever step (onboarding or work) makes the call.
        provider = self.provider(conv.config)
        # Only a work turn's call is cut short by mail (onboarding has no place for it).
        interruptible = request.phase == "work"
        with self.app.runs.calling(self, conv, interruptible=interruptible) as cancel:
            try:
                return self.limits.call(
                    conv, request.model, cancel, lambda c: provider.complete(request, c)
                )
            except Cancelled as exc:
                if self.app.runs.interrupted(self, conv):
                    raise Interrupted(f"the model call of {conv.id} was interrupted") from exc
                raise

    def run_usage(self, conv: Conversation) -> dict[str, Any]:
        """What ``conv``'s subtree spent since its current run began (JSON)."""
        return self.limits.usage(conv)

    # -- the loop ---------------------------------------------------------------------
    def run(self, conv_id: str) -> State:
        """Run ``conv_id`` until it waits for its caller, is idle, failed or killed."""
        conv = Conversation(self.ws.conv_root, conv_id)
        with locks.conversation_lock(self.ws.local_dir, conv.id, wait=self.lock_wait):
            return self.run_locked(conv)

    def run_locked(self, conv: Conversation) -> State:
        # A registered run: kill cancels it, and caller mail is delivered (jpfs.services.conversations.runs).
        # With peers sharing the record, claimed on the remote first (re-entrant).
        with self.app.claims.claimed(self.ws, conv.id), conv.exclusive(), self.limits.running(conv):
            return self.app.runs.supervise(
                self,
                conv,
                self.drive,
                lambda c: inputs.deliver(self.ws, c),
                lambda: steering.interrupting(self.ws, conv.id),
            )

    def drive(self, conv: Conversation) -> State:
        turns = 0
        self.recording.begin(conv)  # a new run looks at all of events/
        self.commit_caller_edits(conv)
        try:
            self.admit(conv)
        except ProfileError as exc:
            self.fail(conv, str(exc))
            return State.FAILED
        while True:
            if self.cancel.is_set():
                raise Cancelled(f"run of {conv.id} cancelled")
            try:
                state = tree.state_of(conv)
                if state in (State.ONBOARDING, State.RUNNING):
                    self.limits.check_clock(conv)  # a long tool step ends the run here
                if state is State.ONBOARDING:
                    onboarding.step(self, conv)
                elif state is State.RUNNING:
                    limit = conv.settings.limits.max_turns
                    # The call after the limit's is made too (its answer may end the
                    # run); counting it, this many calls are left.
                    if self.work_step(conv, calls_left=limit + 1 - turns):
                        turns += 1
                        if turns > limit and tree.state_of(conv) is State.RUNNING:
                            raise LimitError(f"turn limit reached ({limit} model turns in one run)")
                elif state is State.FINISHING:
                    self.finish(conv, success=True)
                else:
                    return state
            except Cancelled:
                raise
            except (ProviderError, LimitError, FormatError) as exc:
                self.fail(conv, str(exc))
                return State.FAILED

    def work_step(self, conv: Conversation, calls_left: int | None = None) -> bool:
        """One unit of work; returns True when it was a model turn. ``calls_left``: model
        calls this run may still make, the next one included (limits.max_turns)."""
        events = conv.events()
        if not events:
            brief = onboarding.work_brief(conv)
            self.record_event(conv, "user", brief, event="input")
            return False
        pending = messages.pending_tool_calls(events)
        if pending:
            self.run_tools(conv, pending)
            self.commit_edits(
                conv, [str(c["name"]) for c in pending], [str(c["id"]) for c in pending]
            )
            return False
        if self.steer(conv, events, calls_left):
            return False  # the next step makes the call, with what was delivered
        tools = self.tools_for(conv)
        self.note(f"[{conv.id}] model turn ({conv.settings.model})")
        try:
            sent = turn.call(
                self.ws, conv, events, tools, lambda request: self.complete(conv, request)
            )
        except Interrupted:
            self.note(f"[{conv.id}] model call interrupted by mail")
            return False  # the next step delivers the mail and calls again
        reply, asked = sent.reply, conv.settings.model
        model = reply.model or asked
        priced = prices.billed_as(reply.model, asked, self.ws.prices)
        meta: dict[str, Any] = {
            "model": model,
            "usage": usage.record(reply.usage, priced, self.ws.prices),
            "stop_reason": reply.stop_reason,
            "context": sent.context(),
        }
        if reply.thinking:
            # The agent's own: kept byte for byte (it goes back while the API needs it),
            # never in result.md, a status mail or a caller's context.
            meta["thinking"] = [dict(block) for block in reply.thinking]
        if reply.tool_calls:
            meta["tool_calls"] = [
                {"id": c.id, "name": c.name, "input": c.input} for c in reply.tool_calls
            ]
        self.record_event(
            conv,
            "assistant",
            reply.text,
            meta,
            event="assistant",
            model=meta["model"],
            usage=reply.usage,
            priced_as=priced,
        )
        return True

    def steer(self, conv: Conversation, events: list[Event], calls_left: int | None) -> bool:
        """Before a model call: deliver the caller's mail that arrived since the last one,
        then jpfs's own notes now due (:mod:`jpfs.services.conversations.steering`), each
        an event the call's request ends with. True when something was delivered."""
        made = False
        try:
            pending = mail.take_in(self.ws, conv.id)  # a file saved by hand counts too
        except FormatError as exc:  # a malformed file in its inbox: the run goes on
            self.note(f"[{conv.id}] mail not read: {exc}")
            pending = []
        done = steering.delivered(events)
        # Delivered before a crash took the read marks: marked now, never sent again.
        mail.mark_read(self.ws, conv.id, [m for m in pending if m.id in done])
        msgs = [m for m in pending if m.id not in done]
        if msgs:
            meta = {"delivered": steering.MID_RUN, "mail": [m.id for m in msgs]}
            self.note(f"[{conv.id}] mail delivered mid-run: {', '.join(m.id for m in msgs)}")
            # The event first, then the read marks: mail an event names is never
            # delivered again, whatever a crash left of the marks.
            self.record_event(
                conv, "user", steering.as_input(msgs), meta, event="input", note="(mail, mid-run)"
            )
            mail.mark_read(self.ws, conv.id, msgs)
            made = True
        for due in steering.notes_due(events, self.limits.figures(conv, calls_left)):
            self.note(f"[{conv.id}] note: {due.kind}")
            self.record_event(
                conv, "user", due.text, {"note": due.kind}, event="note", note=due.kind
            )
            made = True
        return made

    def admit(self, conv: Conversation) -> None:
        """Refuse a conversation whose ``[config]`` grants more than its profile does
        (:func:`jpfs.core.profiles.admit`: the record never grants capabilities), or whose
        profile runs local programs without the user's trust (:mod:`jpfs.services.workspace.trust`)."""
        snapshot = conv.config
        if not snapshot:
            # Not adopted yet (its adoption failed, say untrusted, and new input came
            # before the daemon looked again): adopt it now, never run it bare.
            lifecycle.adopt(self.ws, conv, lifecycle.head_commit(self.ws))
            return
        agent = str(conv.meta().get("agent") or snapshot.get("name") or "")
        policy.admit(self.ws, conv.id, agent, snapshot)

    # -- tools ------------------------------------------------------------------------
    def tools_for(self, conv: Conversation) -> dict[str, Tool]:
        if self.app.toolbox is None:
            raise RuntimeError("no toolbox: this runner's App was built without one")
        return self.app.toolbox(conv.config, self.ws.agents_dir)

    def tool_context(self, conv: Conversation) -> ToolContext:
        config = conv.config
        return ToolContext(
            workspace_root=self.ws.root,
            conversation=conv.id,
            files_root=self.files_root(conv),
            writable=conv.settings.tools.write,
            cancel=self.app.runs.cancel_event(self, conv),
            workspace=self.ws,
            config=config,
            runner=self,
        )

    def files_root(self, conv: Conversation) -> Any:
        from jpfs.services.forks import branches

        return branches.files_root(self.ws, conv)

    def commit_edits(
        self, conv: Conversation, tools: list[str] | None = None, calls: list[str] | None = None
    ) -> None:
        """Commit the agent's file edits onto its branch (branch workspaces only), linked
        to the tool events of ``calls`` (protocol/provenance.md)."""
        from jpfs.services.forks import branches

        agent = str(conv.meta().get("agent") or "agent")
        branches.commit_edits(
            self.ws,
            conv.id,
            agent=agent,
            author=agent_identity(agent),
            tools=tools,
            links=lambda: record.edit_links(self.ws, conv, calls or ()),
        )

    def run_tools(self, conv: Conversation, calls: list[dict[str, Any]]) -> None:
        tools = self.tools_for(conv)
        ctx = self.tool_context(conv)

        def one(call: dict[str, Any]) -> None:
            self.note(f"[{conv.id}] tool {call['name']}")
            call_ctx = dataclasses.replace(ctx, call_id=call["id"])
            text, is_error = self.call_tool(tools, call_ctx, call)
            meta = {"tool_call_id": call["id"], "tool_name": call["name"], "is_error": is_error}
            with self._append_lock:
                self.record_event(conv, "tool", text, meta, event="tool", note=call["name"])

        if len(calls) == 1:
            one(calls[0])
            return
        # Several calls in one reply run concurrently (e.g. two jp_query children).
        with ThreadPoolExecutor(max_workers=min(len(calls), 8)) as pool:
            for future in [pool.submit(one, c) for c in calls]:
                future.result()

    call_tool = staticmethod(call_tool)

    # -- endings ----------------------------------------------------------------------
    def final_text(self, conv: Conversation) -> str:
        last = conv.last_event()
        return last.body if last is not None and last.role == "assistant" else ""

    def finish(self, conv: Conversation, *, success: bool) -> None:
        last = conv.last_event()
        seq = last.seq if last is not None else 0
        text = self.final_text(conv)
        report = text
        wrapped = steering.wrapped_up(conv.events())
        if wrapped:
            # Asked to wrap up before its limit: its answer is a summary of work cut
            # short, which the caller must not take for the task done.
            success = False
            report = f"{text.rstrip()}\n\n(jpfs: {wrapped})"
        meta = {"event": seq, "created": now(), "success": success}
        self.commit_edits(conv)
        if self.on_finish is not None:
            self.on_finish(self, conv, success, report)
        # result.md last: it marks the run as reported (state idle).
        conv.write(RESULT, frontmatter.render(meta, text))
        self.commit(conv, "result")

    def fail(self, conv: Conversation, message: str) -> None:
        self.note(f"[{conv.id}] failed: {message}")
        try:
            summary = steering.last_answer(conv.events())
        except FormatError:  # the failure may be its events' own
            summary = ""
        with self._append_lock:
            conv.append_event("error", message.rstrip() + "\n")
            conv.update(status="failed")
        if self.on_finish is not None:
            # A run stopped at a limit after it was asked to wrap up has written what it
            # did: the caller gets that, and why it stopped.
            report = f"{summary.rstrip()}\n\n(stopped: {message})" if summary else message
            self.on_finish(self, conv, False, report)
        self.commit(conv, "error", note=message.splitlines()[0][:80] if message else None)
