"""The reconciler: turns file events and scans into "look at conversation X now".

One thread owns all of this state; the watcher and the pool only post to its inbox.
For each conversation it is woken for, it

1. waits until every file touched there has settled (:mod:`settling`: a save that
   ended with close or rename on arrival; anything else, deletions included, after
   ``settle`` seconds without an event and no process holding it open for writing), so
   an editor's save-by-rename is one change and a half-written file is never acted on;
2. takes the conversation's run lock without waiting (held by a run here or in
   another process: look again when it is free) and commits the files that differ from
   HEAD as the user's edit (:mod:`jpfs.services.daemon.edits`);
3. asks :func:`jpfs.services.daemon.actions.needs` what the files call for, and adopts the
   conversation, records its error, or queues it in the pool.

Scans (at start-up, every ``scan_interval`` seconds, after an inotify overflow, and
for each directory that appears) find what events missed; a scan skips conversations
whose files' stat signature did not change since the last look and needed nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from jpfs.core import locks, tree
from jpfs.core.conversation import ANSWERS, INBOX, Conversation
from jpfs.core.scope import CONVERSATION_TOML, TASK
from jpfs.core.workspace import Workspace
from jpfs.errors import GitError, IdError, JpfsError, LockError, RepositoryFault
from jpfs.infra.git import refs
from jpfs.infra.git.objects import Tip
from jpfs.services.daemon import actions, edits
from jpfs.services.daemon.actions import Need
from jpfs.services.daemon.backoff import Backoff
from jpfs.services.daemon.echoes import Echoes
from jpfs.services.daemon.inbox import Inbox, Message, RecordMoved, Rescan, RunDone
from jpfs.services.daemon.pool import Pool
from jpfs.services.daemon.seen import Seen, signature
from jpfs.services.daemon.settling import FileState, Settling
from jpfs.services.daemon.watcher import CLOSED, DELETED, MODIFIED, MOVED_FROM, MOVED_TO, Batch
from jpfs.services.workspace import policy

log = logging.getLogger("jpfs.services.daemon")

TOP_FILES = (TASK, ANSWERS, CONVERSATION_TOML)
# Conversations looked at together (locks held at once, commits in flight at once).
CHUNK = 32
# A conversation locked elsewhere is looked at again after 0.1, 0.2, 0.4 ... seconds, at
# most this many; one whose repository fails after 1, 2, 4 ..., at most a minute.
LOCKED_WAIT_MAX = 2.0
FAULT_WAIT_MAX = 60.0


@dataclass
class Serving:
    """A conversation being looked at, its run lock held."""

    conv_id: str
    conv: Conversation | None
    verdict: actions.Verdict
    groups: dict[str, list[str]]  # conversation id -> files to commit as the user's edit
    adopted: bool = False


class Reconciler:
    def __init__(
        self,
        ws: Workspace,
        pool: Pool,
        *,
        debounce: float,
        settle: float,
        scan_interval: float,
        on_error: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.ws = ws
        self.pool = pool
        self.debounce = debounce
        self.settle = settle
        self.scan_interval = scan_interval
        self.on_error = on_error
        # A Queue, not a SimpleQueue: the main thread waits on it, and a signal landing in
        # SimpleQueue.get(timeout=...) can leave that wait unending (CPython 3.11, 3.12:
        # its C lock wait does not resume right after the handler ran), so that
        # `daemon stop`, even --force, timed out until something else was queued.
        self.inbox: queue.Queue[Message] = Inbox()
        self.settling = Settling(ws.conv_root)  # files touched, until they settle
        self.due: dict[str, float] = {}  # conversation id -> when to look at it
        self.backoff = Backoff(first=0.1, most=LOCKED_WAIT_MAX)  # locked elsewhere
        self.fault_wait = Backoff(first=1.0, most=FAULT_WAIT_MAX)  # repository fault
        self.seen = Seen()  # id -> (signature, need) at the last look
        self.echoes = Echoes(ws.conv_root)  # the watcher's reports of a merge's writes
        self.head: Tip | None = None
        # With peers: the commit a merge is writing into the worktree ahead of the branch
        # (SyncEngine.merging), and a view of its tree.
        self.merging: Callable[[], str | None] = lambda: None
        self._merged: tuple[str, Tip] | None = None
        # Peers share the record (sync.remote): adopting and recording an error are
        # claimed like a run, so they happen in the pool, under the conversation's lease.
        self.shared = False
        # With peers: this daemon's own order for the conversations it queues together
        # (Claimer.order), so daemons that see the same new work at once seldom claim the
        # same first, and each can tell which one another will reach last.
        self.spread: Callable[[str], bytes] | None = None
        self.scans = 0
        self.last_scan_seconds = 0.0
        self.next_scan = time.monotonic() + scan_interval

    # -- posting (any thread) ----------------------------------------------------------
    def post(self, batch: Batch) -> None:
        self.inbox.put(batch)

    def run_done(self, conv_id: str, after: float = 0.0) -> None:
        """A run ended: look at the conversation again ``after`` seconds from now."""
        self.inbox.put(RunDone(conv_id, after))

    def request_scan(self) -> None:
        self.inbox.put(Rescan())

    def record_moved(self, before: str, after: str) -> None:
        """The sync took a peer's record in, moving the branch from ``before`` to ``after``."""
        self.inbox.put(RecordMoved(before, after))

    # -- the loop (reconciler thread) --------------------------------------------------
    def start(self, stop: threading.Event | None = None) -> None:
        """Look at every conversation that changed since the last daemon saw it (every
        one on a first start), and forget the admission of those removed meanwhile;
        ``stop`` cuts it short."""
        self.head = Tip(self.ws.conv_root)
        self.scan(full=not self.seen.load(self.ws.local_dir), stop=stop, prune=True)

    def close(self) -> None:
        self.seen.save(self.ws.local_dir)

    def loop(self, stop: threading.Event, tick: Callable[[], None]) -> None:
        while not stop.is_set():
            now = time.monotonic()
            wake = min([self.next_scan, now + 1.0, *self.due.values()])
            try:
                item = self.inbox.get(timeout=max(0.0, min(wake - now, 0.25)))
            except queue.Empty:
                item = None
            while item is not None:
                self.handle(item)
                try:
                    item = self.inbox.get_nowait()
                except queue.Empty:
                    item = None
            if stop.is_set():
                break
            self.process_due()
            if time.monotonic() >= self.next_scan:
                self.scan(full=False)
            tick()

    def handle(self, item: Message) -> None:
        if isinstance(item, Batch):
            if item.overflow:
                log.warning("inotify queue overflow: events were lost; rescanning everything")
                self.recover(subject="jpfs: commit edits found after lost file events")
                self.scan(full=True)
            for change in item.changes:
                if not self.echoes.heard(change.path, change.kind, change.is_dir):
                    self.note_change(change.path, change.kind, change.is_dir)
        elif isinstance(item, RunDone):
            self.due[item.conv_id] = time.monotonic() + item.after
        elif isinstance(item, Rescan):
            self.scan(full=True)
        elif isinstance(item, RecordMoved):
            self.take_merged(item.before, item.after)

    def take_merged(self, before: str, after: str) -> None:
        """The files a sync wrote are whole (git wrote them, before the branch moved):
        those that may call for work (a task, answers, mail) are looked at now, not
        after the watcher's debounce (a merge's new files arrive as bare "created"
        events); and a file seen before the branch moved, which waits a settle as a
        human's unfinished save, is looked at again now."""
        try:
            changed = refs.changed_files(self.ws.conv_root, before, after)
        except GitError:
            changed = []  # the watcher reports them, a debounce later
        self.echoes.expect(changed)  # and the watcher's reports of them are echoes
        for path, deleted, _blob, _mode in changed:
            inner = edits.conv_of(path)[1]
            if inner in TOP_FILES or inner.startswith(f"{INBOX}/"):
                self.note_change(path, DELETED if deleted else CLOSED, False)
        now = time.monotonic()
        for conv_id, due in self.due.items():
            paced = conv_id in self.backoff or conv_id in self.fault_wait
            if due > now and not paced and self.settling.paths(conv_id):
                self.due[conv_id] = now

    def note_change(self, path: str, kind: str, is_dir: bool) -> None:
        now = time.monotonic()
        ended = kind in (CLOSED, MOVED_TO)
        if is_dir:
            conv_id, complete, ended = edits.conv_dir_of(path), False, True
            if kind not in (DELETED, MOVED_FROM):
                self.scan_under(conv_id)
        else:
            conv_id, inner = edits.conv_of(path)
            if edits.agent_written(inner) and conv_id and self.pool.is_running(conv_id):
                return  # our own run's transcript: its commits are the record
            complete = ended and not edits.agent_written(inner)
        self.settling.note(conv_id, path, FileState(now, complete, ended))
        due = self.due.get(conv_id)
        paced = conv_id in self.backoff or conv_id in self.fault_wait  # locked, or failing
        if due is None or (due > now + self.settle and not paced):
            # A change is looked at now (settling decides when it is saved), even if a
            # much later look was due: a claim lost to a peer looks again when its lease
            # may end, which must not hold up a human's edit meanwhile. A look due within
            # a settle stays (a save in progress is looked at once it may have ended).
            self.due[conv_id] = now

    def process_due(self) -> None:
        now = time.monotonic()
        due = [c for c, t in self.due.items() if t <= now]
        for conv_id in due:
            del self.due[conv_id]
        for n in range(0, len(due), CHUNK):
            self.reconcile(due[n : n + CHUNK])

    # -- conversations ----------------------------------------------------------------------
    def reconcile(self, conv_ids: list[str]) -> None:
        """Look at these conversations: commit their edits together, then act on each.

        The edits of all of them are committed concurrently, so the committer's group
        commit lands a burst of saves in a few commits instead of one after another.
        """
        serving: list[Serving] = []
        with contextlib.ExitStack() as held:
            for conv_id in conv_ids:
                try:
                    item = self.prepare(conv_id, held)
                except Exception as exc:  # one conversation must never stop the daemon
                    self.failed(conv_id, exc)
                    continue
                if item is not None:
                    serving.append(item)
            groups = [g for item in serving for g in item.groups.items()]
            committed = edits.commit_all(self.ws, groups, self.on_error, workers=CHUNK)
            for item in serving:
                try:
                    self.conclude(item, committed)
                except Exception as exc:
                    self.failed(item.conv_id, exc)
        for item in serving:  # the run locks are released: the pool may take them
            self.backoff.forget(item.conv_id)
            self.fault_wait.forget(item.conv_id)
            self.settling.forget(item.conv_id)
        ready = [item.conv_id for item in serving if item.verdict.need in self.pooled]
        for conv_id in sorted(ready, key=self.spread) if self.spread else ready:
            self.pool.submit(conv_id)

    @property
    def pooled(self) -> tuple[Need, ...]:
        return (Need.RUN, Need.ADOPT, Need.BROKEN) if self.shared else (Need.RUN,)

    def failed(self, conv_id: str, exc: Exception) -> None:
        """A look at ``conv_id`` raised (in its ``except``): the repository's or the
        disk's fault is looked at again later; anything else is a bug, logged."""
        fault = RepositoryFault.of(exc)
        if fault is not None:
            self.look_again_later(conv_id, fault)
            return
        log.exception("reconciling %r failed", conv_id)
        self.on_error(f"{conv_id}: {exc}")

    def look_again_later(self, conv_id: str, exc: RepositoryFault) -> None:
        """The repository failed, not the conversation: say so, and look again after
        1, 2, 4 ... seconds (at most a minute), so the fix is all the user has to do."""
        wait = self.fault_wait.next(conv_id)
        self.due[conv_id] = time.monotonic() + wait
        log.warning("%s: repository fault, looking again in %g s: %s", conv_id, wait, exc)
        self.on_error(f"{conv_id}: {exc} (trying again in {wait:g} s)")

    def prepare(self, conv_id: str, held: contextlib.ExitStack) -> Serving | None:
        """Take the run lock, adopt, find the edits to commit; None: nothing to do now."""
        paths = self.settling.paths(conv_id)
        settled = self.settling.settled_at(paths, max(0.0, self.settle - self.debounce))
        if settled > time.monotonic():
            if not self.recorded(paths):
                self.due[conv_id] = settled
                return None
        elif self.settling.still_written(paths):
            self.due[conv_id] = time.monotonic() + self.settle
            return None
        if not conv_id:  # files at the root belong to no conversation
            return Serving("", None, actions.Verdict(Need.NOTHING), self.dirty(paths))
        if self.pool.is_running(conv_id):
            return None  # the pool calls back when the run ends; touched paths wait till then
        try:
            conv = Conversation(self.ws.conv_root, conv_id)
        except IdError:
            self.settling.forget(conv_id)
            return None
        if not paths:
            # The common case of a scan: nothing touched and nothing needed, no lock taken.
            verdict = actions.needs(self.ws, conv)
            if verdict.need is Need.NOTHING:
                self.seen.put(conv_id, signature(conv), verdict.need)
                return None
        try:
            held.enter_context(locks.conversation_lock(self.ws.local_dir, conv_id))
        except LockError:
            self.due[conv_id] = time.monotonic() + self.backoff.next(conv_id)
            return None
        assert self.head is not None
        verdict = actions.needs(self.ws, conv)
        adopted = False
        if verdict.need is Need.ADOPT and not self.shared:
            try:
                agent = actions.adopt(self.ws, conv, self.head.refresh())
                log.info("%s: new conversation from task.md (agent %s)", conv.id, agent)
                adopted = True
            except JpfsError as exc:
                verdict = actions.Verdict(Need.BROKEN, reason=str(exc).splitlines()[0])
        candidates = set(paths)
        if paths or verdict.need is not Need.NOTHING:
            candidates.update(f"{conv.id}/{name}" for name in TOP_FILES)
        return Serving(conv_id, conv, verdict, self.dirty(candidates), adopted)

    def recorded(self, paths: set[str]) -> bool:
        """Whether these touched files already are the record's (a merge from a peer
        wrote them, with git): nothing of anyone's is half-saved there, so nothing to
        wait for. (A file open for writing but unchanged yet reads as the record says;
        what its writer saves later is an edit of its own.)"""
        return bool(paths) and not self.dirty(paths)

    def dirty(self, paths: set[str]) -> dict[str, list[str]]:
        assert self.head is not None
        commit = self.merging()
        if commit is not None and (self._merged is None or self._merged[0] != commit):
            merged = Tip(self.ws.conv_root, rev=commit)
            merged.refresh()
            self._merged = (commit, merged)
        merging = self._merged[1] if commit is not None and self._merged else None
        return edits.dirty(self.ws, self.head, paths, self.on_error, merging)

    def conclude(self, item: Serving, committed: set[str]) -> None:
        """Still under the lock: what the committed files call for; record a broken one."""
        if item.conv is None:
            return
        # A conversation that could not be adopted stays broken: re-deriving would say
        # "adopt" again and leave the error unreported until the next periodic scan.
        if (item.conv_id in committed or item.adopted) and item.verdict.need is not Need.BROKEN:
            item.verdict = actions.needs(self.ws, item.conv)
        if item.verdict.need is Need.BROKEN and not self.shared:
            log.warning("%s: %s", item.conv_id, item.verdict.reason)
            self.on_error(f"{item.conv_id}: {item.verdict.reason}")
            actions.record_failure(self.ws, item.conv, item.verdict.reason)
        elif item.verdict.reason and item.verdict.need is Need.NOTHING:
            log.warning("%s: %s", item.conv_id, item.verdict.reason)
            self.on_error(f"{item.conv_id}: {item.verdict.reason}")
        self.seen.put(item.conv_id, signature(item.conv), item.verdict.need)

    # -- scans ---------------------------------------------------------------------------------
    def scan(self, *, full: bool, stop: threading.Event | None = None, prune: bool = False) -> None:
        """Look at every conversation whose files changed (all of them when ``full``);
        ``prune``: and forget the admission of those that no longer exist (22 ms at
        10k conversations, so once per start, not every periodic scan)."""
        started, listed = time.monotonic(), time.time()
        looked: list[str] = []
        live = set()
        root = os.fspath(self.ws.conv_root)
        for conv_id in tree.walk(self.ws.conv_root):
            if stop is not None and stop.is_set():
                return  # stopping: the next start looks again (nothing was forgotten)
            live.add(conv_id)
            if not full and self.seen.unchanged(conv_id, os.path.join(root, conv_id)):
                continue
            if conv_id in self.settling:  # its files are settling: it is due anyway
                self.due.setdefault(conv_id, time.monotonic())
                continue
            looked.append(conv_id)
            if len(looked) % CHUNK == 0:
                self.reconcile(looked[-CHUNK:])
        self.reconcile(looked[len(looked) - len(looked) % CHUNK :])
        self.seen.keep_only(live)
        self.seen.save(self.ws.local_dir)
        if prune:
            policy.keep_admitted(self.ws, live, listed)
        self.scans += 1
        self.next_scan = time.monotonic() + self.scan_interval
        took = self.last_scan_seconds = time.monotonic() - started
        log.debug("scan: looked at %d of %d in %.3fs", len(looked), len(live), took)

    def scan_under(self, conv_id: str) -> None:
        """A directory appeared: its files may predate the watch on it."""
        found = [conv_id] if conv_id else []
        found += list(tree.walk(self.ws.conv_root, conv_id or None))
        for cid in found:
            self.due.setdefault(cid, time.monotonic())

    def recover(self, subject: str, before_ns: int | None = None) -> None:
        """Commit whatever differs from HEAD under the root: see :func:`edits.commit_found`."""
        edits.commit_found(self.ws, subject, self.note_unfinished, self.on_error, before_ns)

    def note_unfinished(self, path: str) -> None:
        """A write not seen to end: committed once settled and no longer open for writing."""
        self.note_change(path, MODIFIED, False)
