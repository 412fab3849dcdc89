"""The runs of a process: per-conversation cancellation, and noticing a kill.

Every run of a conversation (``Runner.run_locked``) goes through
:meth:`RunTable.supervise`, which registers it in the process's table (one
:class:`RunTable`, owned by the application object, :mod:`jpfs.services.run.app`)
with a cancel event of its own. That event, not the
runner's, is what the run's provider calls and command tools see
(:meth:`RunTable.cancel_event`), so killing one conversation stops exactly that one.

A kill reaches a run in two ways:

- in this process, :meth:`RunTable.cancel` sets the run's event at once;
- from another process (``jpfs kill`` while a daemon or ``jpfs query`` runs the
  agent), a watcher thread polls each running conversation's
  ``conversation.toml`` every :data:`POLL` seconds (a ``stat``; the file is parsed only
  when it changed) and sets the event when it says ``status = "killed"``. The kill
  is in the file first, so no signal can be lost and no pid can be stale; the cost
  is one stat per run per tick.

There is one watcher thread per runner that has runs: it waits on the runner's own
cancel event (daemon stop, a cancelled MCP request), so that reaches each of the
runner's runs at once; it exits when the runner has no run left.

A provider or command tool that sees the event raises ``Cancelled`` (or kills its
process group); :meth:`RunTable.supervise` turns that into ``State.KILLED`` when the
conversation was killed, and re-raises it when the runner itself was cancelled.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
import tomllib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from jpfs.core.conversation import ANSWERS, EVENTS, FILES, QUESTIONS, RESULT
from jpfs.core.scope import CONVERSATION_TOML, TASK
from jpfs.core.state import State
from jpfs.core.usage import LEDGER
from jpfs.errors import Cancelled

if TYPE_CHECKING:
    from jpfs.core.conversation import Conversation
    from jpfs.core.workspace import Workspace
    from jpfs.infra.providers.base import Reply, Request

log = logging.getLogger("jpfs.services.conversations.runs")


class RunContext(Protocol):
    """What the services below the run loop need of a run (a
    :class:`jpfs.services.run.runtime.Runner` is one). They name this shape instead of
    importing the run loop, which imports them."""

    ws: Workspace
    cancel: threading.Event

    def note(self, text: str) -> None: ...

    def commit(self, conv: Conversation, event: str, **kwargs: Any) -> None: ...

    def complete(self, conv: Conversation, request: Request) -> Reply: ...

    def run_usage(self, conv: Conversation) -> dict[str, Any]: ...


POLL = 0.1
Stamp = tuple[int, int, int]


@dataclass
class Run:
    runner: RunContext
    conv_id: str
    toml: Path
    cancel: threading.Event
    stamp: Stamp | None
    # Steering (jpfs.services.conversations.steering): whether mail in ``inbox`` asks to
    # interrupt; the event of the model call in flight, set on a cancel or an interrupt.
    inbox: Path | None = None
    interrupting: Callable[[], bool] | None = None
    call: threading.Event | None = None
    inbox_stamp: Stamp | None = None
    interrupted: bool = False


def _key(root: Path, conv_id: str) -> tuple[str, str]:
    return (str(root), conv_id)


def file_stamp(path: Path) -> Stamp | None:
    """(inode, mtime, size) of ``path``, None if it cannot be stat: changed or not."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def status_of(toml: Path) -> str:
    """The ``status`` in a conversation.toml; "" when unreadable (mid-edit, missing)."""
    try:
        with toml.open("rb") as fh:
            return str(tomllib.load(fh).get("status", ""))
    except (OSError, tomllib.TOMLDecodeError, RecursionError):
        return ""


def own_paths(ws: Workspace, conv: Conversation, events: Sequence[str] | None = None) -> list[str]:
    """What a run of ``conv`` commits: its own files, never a descendant's or its inbox.

    A child may be mid-write while its parent commits (forks run concurrently), and
    its steps belong in its own commits; mail commits itself. ``events``: only these
    event files instead of the whole ``events/`` directory (event files are created
    once and never rewritten, so a run that committed the directory once need name
    only the new ones: a commit then costs what changed, not the conversation's length).
    """
    names = [CONVERSATION_TOML, TASK, QUESTIONS, ANSWERS, RESULT, FILES, LEDGER]
    if events is None:
        names.append(EVENTS)
    else:
        names += [f"{EVENTS}/{name}" for name in events]
    # Missing ones too: a file the caller deleted is committed as deleted.
    prefix = ws.rel(conv.path)
    return [f"{prefix}/{name}" for name in names]


@contextlib.contextmanager
def cancelled_at(cancel: threading.Event, deadline: float) -> Iterator[threading.Event]:
    """An event set when ``cancel`` is, or at ``deadline`` (``time.monotonic()``), for
    one call that must end with the run's clock; it stops being watched on exit."""
    event = threading.Event()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set() and not event.is_set():
            if cancel.is_set() or time.monotonic() >= deadline:
                event.set()
                return
            done.wait(min(POLL, max(deadline - time.monotonic(), 0.0)))

    watcher = threading.Thread(target=watch, name="jpfs-run-clock", daemon=True)
    watcher.start()
    try:
        yield event
    finally:
        done.set()
        watcher.join()


class RunTable:
    """This process's runs, by (workspace root, conversation id): a kill from another
    thread finds the run here. Process-wide by nature, so owned by the application
    object and handed down, never a module global."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, str], Run] = {}
        self._watchers: dict[int, threading.Thread] = {}

    def cancel_event(self, runner: RunContext, conv: Conversation) -> threading.Event:
        """The event a run of ``conv`` by ``runner`` is cancelled by (the runner's outside one)."""
        run = self._runs.get(_key(runner.ws.root, conv.id))
        return run.cancel if run is not None else runner.cancel

    def cancel(self, root: Path, conv_id: str) -> bool:
        """Cancel the run of ``conv_id`` in this process, if there is one."""
        run = self._runs.get(_key(root, conv_id))
        if run is None:
            return False
        run.cancel.set()
        if run.call is not None:
            run.call.set()
        return True

    @contextlib.contextmanager
    def calling(
        self, runner: RunContext, conv: Conversation, *, interruptible: bool = True
    ) -> Iterator[threading.Event]:
        """Around one model call of a run: the event the call stops by, set when the run
        is cancelled, or (``interruptible``) when mail asking to interrupt arrives (then
        :meth:`interrupted` says so). Tools never see it: an interrupt waits for them."""
        run = self._runs.get(_key(runner.ws.root, conv.id))
        if run is None or not interruptible:
            yield self.cancel_event(runner, conv)
            return
        event = threading.Event()
        run.interrupted = False
        run.inbox_stamp = None  # looked at afresh: mail that came before the call counts
        run.call = event
        if run.cancel.is_set():
            event.set()
        try:
            yield event
        finally:
            run.call = None

    def interrupted(self, runner: RunContext, conv: Conversation) -> bool:
        """Whether the last model call of ``conv``'s run was cut short by mail."""
        run = self._runs.get(_key(runner.ws.root, conv.id))
        return run is not None and run.interrupted and not run.cancel.is_set()

    def supervise(
        self,
        runner: RunContext,
        conv: Conversation,
        drive: Callable[[Conversation], State],
        deliver: Callable[[Conversation], bool],
        interrupting: Callable[[], bool] | None = None,
    ) -> State:
        """Run ``drive`` as a registered, killable run; then ``deliver`` and go on.

        After each drive, ``deliver`` turns mail from the conversation's caller that
        arrived meanwhile into its next input (the runtime passes
        :func:`jpfs.services.conversations.inputs.deliver`), so a message sent while the agent was busy is never
        left behind when it stops; it returns whether there was any. ``interrupting``
        says whether mail in its inbox asks to interrupt a model call in flight.
        """
        key = _key(runner.ws.root, conv.id)
        run = Run(runner, conv.id, conv.toml_path, threading.Event(), file_stamp(conv.toml_path))
        run.inbox, run.interrupting = conv.path / "inbox", interrupting
        with self._lock:
            outer = self._runs.get(key)
            self._runs[key] = run
            self._ensure_watcher(runner)
        try:
            while True:
                state = drive(conv)
                if not deliver(conv):
                    return state
        except Cancelled:
            if not runner.cancel.is_set() and status_of(conv.toml_path) == "killed":
                runner.note(f"[{conv.id}] killed")
                return State.KILLED
            raise
        finally:
            with self._lock:
                if outer is not None:
                    self._runs[key] = outer
                elif self._runs.get(key) is run:
                    del self._runs[key]

    def _ensure_watcher(self, runner: RunContext) -> None:
        key = id(runner)
        if key not in self._watchers:
            thread = threading.Thread(
                target=self._watch, args=(runner,), name="jpfs-runs-watcher", daemon=True
            )
            self._watchers[key] = thread
            thread.start()

    def _watch(self, runner: RunContext) -> None:
        """Watch ``runner``'s runs; one thread per runner, so its own cancel wakes it at once."""
        tick = threading.Event()  # never set: a timed wait once the runner's cancel is set
        while True:
            with self._lock:
                mine = [run for run in self._runs.values() if run.runner is runner]
                if not mine:
                    # Removed under the lock: a run registered after this starts a new one.
                    del self._watchers[id(runner)]
                    return
            stopping = runner.cancel.is_set()
            for run in mine:
                call = run.call
                if run.cancel.is_set():
                    if call is not None:
                        call.set()
                    continue
                if call is not None and not call.is_set() and _interrupts(run):
                    log.info("%s: mail interrupts its model call", run.conv_id)
                    run.interrupted = True
                    call.set()
                if stopping:
                    run.cancel.set()
                    if call is not None:
                        call.set()
                    continue
                stamp = file_stamp(run.toml)
                if stamp != run.stamp:
                    run.stamp = stamp
                    if status_of(run.toml) == "killed":
                        log.info("%s was killed: cancelling its run", run.conv_id)
                        run.cancel.set()
                        if call is not None:
                            call.set()
            (tick if stopping else runner.cancel).wait(POLL)


def _interrupts(run: Run) -> bool:
    """Whether mail asking to interrupt came into ``run``'s inbox (looked at only when
    the inbox changed since the last look: one stat per tick)."""
    if run.inbox is None or run.interrupting is None:
        return False
    stamp = file_stamp(run.inbox)
    if stamp == run.inbox_stamp:
        return False
    run.inbox_stamp = stamp
    return run.interrupting()


def count_running(local_dir: Path) -> int:
    """Conversations whose run lock is held right now, by any process on this machine."""
    locks_dir = local_dir / "locks"
    try:
        names = os.listdir(locks_dir)
    except FileNotFoundError:
        return 0
    count = 0
    for name in names:
        if not name.endswith(".lock"):
            continue
        try:
            fd = os.open(locks_dir / name, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            # A shared probe conflicts with the holder's exclusive lock only.
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            count += 1
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
    return count
