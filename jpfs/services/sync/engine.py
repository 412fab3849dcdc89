"""Sharing the record through a git remote: fetch, integrate, push, and leases.

One :class:`SyncEngine` per process and workspace. A cycle (``sync_once``) fetches the
remote's record branch and leases, takes their record into ours
(:mod:`jpfs.services.sync.record`), and pushes ours back in one atomic push that also
renews every lease we hold and deletes the ones we are done with: so a result and the
release of its lease reach the remote together, and a push made after our lease was
taken over fails as a whole (its late turn never lands; see protocol/sync.md).

The daemon runs cycles on a thread (every ``sync.interval`` seconds, or at once when a
run ends) and asks :meth:`claim` before it acts on a conversation; ``jpfs sync`` runs
one cycle by hand.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from jpfs.core.record import machine_name
from jpfs.core.workspace import Workspace
from jpfs.errors import Contended, GitError
from jpfs.infra import git
from jpfs.infra.git import refs, ssh
from jpfs.infra.git import remote as gitremote
from jpfs.infra.git.remote import PushResult, Update
from jpfs.services.sync import leaks
from jpfs.services.sync.batch import ALLOW
from jpfs.services.sync.claiming import Claimer
from jpfs.services.sync.leases import (
    LEASE_NS,
    TOMBSTONE_MIN_AGE,
    LeaseBook,
    Sent,
    new_incarnation,
    read_remote,
    timing,
)
from jpfs.services.sync.outgoing import assemble, sendable
from jpfs.services.sync.presence import MACHINES_NS, Presence
from jpfs.services.sync.record import Integration, integrate
from jpfs.services.sync.stats import SyncStats, Timings
from jpfs.services.sync.upkeep import Upkeep

log = logging.getLogger("jpfs.services.sync")

_PUSH_ATTEMPTS = 4


class SyncEngine:
    def __init__(
        self,
        ws: Workspace,
        *,
        incarnation: str | None = None,
        on_lost: Callable[[str], None] | None = None,
        on_moved: Callable[[str, str], None] | None = None,
        on_observed: Callable[[], None] | None = None,
        share: bool = True,
        announce: bool = False,
    ) -> None:
        """``share``: reuse one SSH connection for all of this engine's git commands
        (a process that makes many: a daemon, runs without one); ``jpfs sync`` by hand
        makes a few and leaves no connection behind. ``announce``: keep a presence ref
        on the remote (:meth:`announce`; a daemon's engine)."""
        self.ws = ws
        settings = ws.config.sync
        self.remote = settings.remote
        self.interval, lease = timing(settings.interval, settings.lease)
        self.machine = machine_name(ws)
        self.incarnation = incarnation or new_incarnation()
        self.branch = ws.record_branch
        self.repo = ws.root
        fetched_from = gitremote.check_remote(self.repo, self.remote)
        # The user's SSH command with BatchMode, and for an SSH remote one connection
        # shared by every fetch, push and claim (jpfs.infra.git.ssh); every git command
        # that reaches the remote uses ``via``.
        urls = (fetched_from, *gitremote.push_urls(self.repo, self.remote))
        self.ssh = ssh.command_for(self.repo, ws.local_dir, share=share and ssh.any_ssh(urls))
        self.via = self.ssh.settings
        self.track_record = f"refs/jpfs/sync/{self.remote}/record"
        self.track_leases = f"refs/jpfs/sync/{self.remote}/leases/"
        self.track_machines = f"refs/jpfs/sync/{self.remote}/machines/"
        self.book = LeaseBook(self.repo, self.machine, self.incarnation, lease)
        self.stats = SyncStats()
        self.timings = Timings()
        self.on_lost = on_lost or (lambda conv_id: None)
        self.on_moved = on_moved or (lambda before, after: None)  # a peer's record taken in
        self.on_observed = on_observed or (lambda: None)  # the peers' holdings changed
        # Whether a run of the conversation is still going here (the daemon's pool): a
        # forfeited one stays forfeit until its cancelled run has stopped writing.
        self.running: Callable[[str], bool] = lambda conv_id: False
        # The commit whose files a merge is writing, or left, in the record worktree
        # before the branch moved to it (None once it has): they are no human's edit.
        self.merging: str | None = None
        self.wake = threading.Event()
        # One pull (fetch + integrate) at a time, one push at a time, one fetch at a time
        # (git locks the tracking refs it writes); never one lock over a whole cycle: a
        # claim waits for a pull begun after it, not for a push in flight or retried.
        self._pulling = threading.RLock()
        self._pushing = threading.RLock()
        self._fetching = threading.Lock()
        self.refusal: dict[str, str] = {}  # why the last claim of a conversation failed
        self._pull_started = self._fetch_started = float("-inf")
        self._last_pull: Integration | None = None
        self._busy = ""  # why the last merge had to wait (said once, not every cycle)
        # Commits to push are scanned for secrets, once each (jpfs.services.sync.leaks).
        self.scan = settings.scan
        self._scanned: set[str] = set()
        # When the fetch whose leases the book holds began.
        self.observed_at = float("-inf")
        # A presence lives as long as a tombstone (protocol/sync.md, "A daemon says it is there").
        age = max(2 * lease, TOMBSTONE_MIN_AGE)
        self.presence = Presence(self.machine, self.incarnation, age, self.book.commit)
        self.upkeep = Upkeep(
            self.book, self.presence, age, self._push_alone, remote=self.remote, announcing=announce
        )
        self.claimer = Claimer(self)
        if refs.resolve(self.repo, self.track_record) is None:
            # Cloned or fetched with git: a view of the remote's record too (pushes stay CAS).
            cloned = refs.resolve(self.repo, f"refs/remotes/{self.remote}/{self.branch}")
            if cloned is not None:
                git.run(self.repo, ["update-ref", self.track_record, cloned, ""], check=False)

    # -- one cycle ---------------------------------------------------------------------------
    def sync_once(
        self, *, push: bool = True, eager: bool = False, observe: bool = True, fetch: bool = True
    ) -> Integration:
        """Fetch, integrate, push (retrying when a peer pushed in between).

        ``eager`` (work of ours to send: a run released its lease, a human ran ``jpfs
        sync``): when ours only adds to the remote's record as last fetched, push first,
        and fetch only if that push loses. The push is a compare-and-swap either way; a
        fetch before it costs a round trip on every result, and at the end of a burst,
        when several machines push at once, it widens each one's window to be overtaken.
        ``observe``: the cycle leaves a view of the leases no older than ``interval``
        (a daemon's claims rely on it; ``jpfs sync`` holds none). ``fetch=False``: only
        push, unless the push loses (then fetch and merge as always), or a forfeit waits
        to be merged."""
        fetch = fetch or not push or bool(self.book.forfeits())
        observe = observe and fetch
        if push and eager and self._ahead():
            if self.push():
                if not observe or time.monotonic() - self.observed_at < self.interval:
                    return Integration("up-to-date")
                outcome = self.pull()  # and push below what it merged, if any
            else:
                outcome = self.pull(fetched=True)  # the failed push fetched theirs
        elif not fetch:
            outcome = Integration("up-to-date")  # what we have, pushed if it adds to theirs
        else:
            outcome = self.pull()
            if not push:
                return outcome
        for _attempt in range(_PUSH_ATTEMPTS):
            if self.push(record=outcome.kind != "busy"):
                return outcome
            # Peers pushed first; the failed push fetched what they pushed. The next
            # attempt renews our leases too; only one that would lapse before it meets
            # a push of its own first (renewals alone never race anyone's record), and
            # then the remote is fetched again.
            renew = self.book.urgent(time.monotonic())
            if renew:
                self.push(record=False)
            outcome = self.pull(fetched=not renew)
        raise Contended(
            f"could not push the record to {self.remote}: other machines pushed first"
            f" {_PUSH_ATTEMPTS} times in a row; the next sync tries again"
        )

    def _ahead(self) -> bool:
        """Whether ours is the remote's record as last fetched plus commits of ours, with
        nothing set aside to merge first (a push could then only fail or add)."""
        ours = refs.resolve(self.repo, f"refs/heads/{self.branch}")
        theirs = refs.resolve(self.repo, self.track_record)
        if ours is None or theirs is None or ours == theirs or self.book.forfeits():
            return False
        return refs.is_ancestor(self.repo, theirs, ours)

    def pull(self, *, fetched: bool = False) -> Integration:
        """Fetch (unless ``fetched``: a failed push just did) and integrate."""
        with self._pulling:
            # What pull_since asks about: when the fetch this pull integrates began (with
            # the pull held and on the cycle's thread, no other fetch is in flight).
            started = self._fetch_started if fetched else time.monotonic()
            if not fetched:
                self.fetch()
            self._pull_started = started
            theirs = refs.resolve(self.repo, self.track_record)
            if theirs is None:
                return Integration("up-to-date")  # the remote has no record yet: our push makes it
            forfeit = self.book.forfeits()  # a push may lose a lease meanwhile
            prefixes = [f"{cid}/" for cid in forfeit]
            with self.timings.step("integrate"):
                outcome = integrate(
                    self.ws.conv_root,
                    self.branch,
                    theirs,
                    remote=self.remote,
                    forfeit=prefixes,
                    aside=self.ws.local_dir / "forfeited",
                    writing=self._writing,
                )
            if outcome.kind in ("merge", "fast-forward"):
                self.stats.merges += int(outcome.kind == "merge")
                self.on_moved(outcome.before or "", outcome.after or "")
            if outcome.kind in ("merge", "fast-forward", "up-to-date"):
                self.merging = None
                # A cancelled run may still commit its late turn: taken in as ours, it
                # would meet the new holder's next turn as a conflict, a copy of ours
                # kept beside theirs. Until it has stopped, every merge takes theirs.
                self.book.settled([conv_id for conv_id in forfeit if not self.running(conv_id)])
            if outcome.conflicts:
                self.stats.conflicts = (self.stats.conflicts + outcome.conflicts)[-20:]
                log.warning(
                    "sync: a file changed on both sides; theirs is kept beside ours as %s",
                    ", ".join(outcome.conflicts),
                )
            self._last_pull = outcome
            if outcome.kind == "busy" and outcome.reason != self._busy:
                log.info(
                    "sync: the record is busy here (%s); merging at the next cycle", outcome.reason
                )
            self._busy = outcome.reason if outcome.kind == "busy" else ""
            return outcome

    def _writing(self, commit: str) -> None:
        self.merging = commit

    def pull_since(self, moment: float) -> Integration:
        """A pull that started after ``moment``: one already made (claims made together
        share one), or a new one."""
        with self._pulling:
            if self._last_pull is not None and self._pull_started > moment:
                return self._last_pull
            return self.pull()

    def fetch(self) -> dict[str, str]:
        """Fetch the remote's record and leases; returns its leases (ref -> value)."""
        with self._fetching:  # git locks the tracking refs a fetch writes
            began = self._fetch_started = time.monotonic()
            self._fetch_refs()
            tracked = refs.messages_under(self.repo, self.track_leases, self.track_machines)
            leases, machines = (
                {r: v for r, v in tracked.items() if r.startswith(p)}
                for p in (self.track_leases, self.track_machines)
            )
            found = read_remote(leases, self.track_leases)
            self.book.observe(found.values, found.released)
            self.presence.observe(machines, self.track_machines, began)
            self.observed_at = began
            # Who picks what first (Claimer.rank): the machines holding leases, those
            # that released one lately (tombstones live a minute or more), so that a
            # machine between two runs keeps its share, and those whose daemons said
            # they are there (before any lease: a cold start's picks do not collide).
            present = self.presence.present(began)
            working = (set(found.peers) | found.releasers | present) - {""}
            changed = (found.peers, working) != (self.stats.peers, self.stats.working)
            self.stats.peers, self.stats.working, self.stats.present = found.peers, working, present
            # Last: a status that shows this fetch shows what it found.
            self.stats.fetches += 1
            self.stats.last_fetch = time.time()
        if changed:
            self.on_observed()
        return found.values

    def _fetch_refs(self) -> None:
        specs = [
            f"+refs/heads/{self.branch}:{self.track_record}",
            f"+{LEASE_NS}*:{self.track_leases}*",
            f"+{MACHINES_NS}*:{self.track_machines}*",
        ]
        common = self.common_ground()
        with self.timings.step("fetch"), self._reaching():
            try:
                gitremote.fetch(self.repo, self.remote, specs, negotiate=common, via=self.via)
            except GitError as exc:
                if "couldn't find remote ref" not in str(exc):
                    raise
                gitremote.fetch(self.repo, self.remote, specs[1:], via=self.via)  # no record yet

    def common_ground(self) -> list[str]:
        """What the remote surely has, for a fetch to negotiate from: the record as it
        last had it, and the parent of every lease value."""
        known = [self.track_record] if refs.resolve(self.repo, self.track_record) else []
        return [*known, self.book.root()]

    def push(self, *, record: bool = True) -> bool:
        """One atomic push of the record and our leases; False: pull and try again.

        ``record=False`` (ours could not be merged with theirs yet) pushes renewals only:
        a lease is given back only together with the work done under it."""
        with self._pushing:
            # Which leases are done is read *before* the tip: a run marks its lease
            # releasing after its last commit, so the tip read next contains that commit.
            held = [(lease, lease.releasing) for lease in self.book.held()]
            ours = refs.resolve(self.repo, f"refs/heads/{self.branch}")
            theirs = refs.resolve(self.repo, self.track_record)
            record = record and sendable(self.repo, self.book.forfeits(), ours, theirs)
            send = record and ours is not None and ours != theirs
            if send and ours is not None and self.scan:
                found = leaks.find(self.repo, theirs, ours, self._scanned)
                if found:
                    # The record stays here; the leases still go (they hold no content).
                    self.push(record=False)
                    raise leaks.refusal(found, self.remote)
            out = assemble(
                self.book,
                held,
                branch=self.branch,
                ours=ours,
                theirs=theirs,
                record=record,
                leases=send or self.book.due(time.monotonic()),
            )
            updates, renewing, releasing = out.updates, out.renewing, out.releasing
            if not updates:
                return True
            began = time.monotonic()
            for conv_id, (oid, seq) in renewing.items():
                self.book.sending(conv_id, Sent(oid, seq, "", began))
            for conv_id, (oid, record_tip) in releasing.items():
                self.book.sending(conv_id, Sent(oid, 0, record_tip, began))
            with self.timings.step("push" if send else "renew"), self._reaching():
                result = gitremote.push(self.repo, self.remote, updates, via=self.via)
            if result.ok:
                if send:
                    self._scanned.clear()  # pushed: theirs holds it now, never scanned again
                self.stats.pushes += 1
                self.stats.last_push = time.time()
                for conv_id, (oid, seq) in renewing.items():
                    self.book.renewed(conv_id, oid, seq)
                self.book.released(releasing)
                if send and ours is not None:
                    # Compare-and-swap: a fetch meanwhile may have seen newer still; and
                    # not during a fetch, which holds the same ref's lock.
                    moved = [self.track_record, ours, theirs or ""]
                    with self._fetching:
                        git.run(self.repo, ["update-ref", *moved], check=False)
                return True
            refused = result.refusal()
            if refused:  # not a race: trying again changes nothing
                raise GitError(f"{self.remote} refused the push of the record: {refused}{ALLOW}")
            # Whatever the push said (a remote rejects every ref of a failed atomic
            # push alike), a lease is lost exactly when the remote holds another value:
            # not one of ours from a push that failed here but took effect there (the
            # fetch's observation adopts those, LeaseBook.observe).
            remote = self.fetch()
            for lease, _ in held:
                if remote.get(lease.ref) != lease.oid and self.book.get(lease.conv_id) is lease:
                    self._lose(lease.conv_id, "another machine holds it now")
            return False

    @contextlib.contextmanager
    def probing(self) -> Iterator[None]:
        """Around each fetch a claim makes (:class:`Probes`)."""
        with self.timings.step("claim-fetch"), self._reaching():
            yield

    @contextlib.contextmanager
    def _reaching(self) -> Iterator[None]:
        """A fetch or push: remember since when the remote has not answered."""
        try:
            yield
        except GitError:
            if not self.stats.unreachable_since:
                self.stats.unreachable_since = time.time()
            raise
        self.stats.unreachable_since = 0.0

    def _lose(self, conv_id: str, why: str) -> None:
        log.warning(
            "sync: lease on %s lost (%s): our work on it since the last push is forfeit",
            conv_id,
            why,
        )
        self.stats.forfeits += 1
        self.book.lost(conv_id)
        self.on_lost(conv_id)

    # -- leases ------------------------------------------------------------------------------
    def claim(self, conv_id: str) -> bool:
        """Take the lease on ``conv_id`` (or keep it); True: act on it, with the files
        brought up to date first. False: another machine holds it
        (:mod:`jpfs.services.sync.claiming`)."""
        return self.claimer.claim(conv_id)

    def release(self, conv_id: str) -> None:
        self.book.release(conv_id)
        self.wake.set()

    def wait_for(self, conv_id: str) -> float:
        return self.book.wait_for(conv_id)

    def sweep(self) -> None:
        self.upkeep.sweep()

    def announce(self) -> None:
        self.upkeep.announce()

    def _push_alone(self, step: str, updates: Sequence[Update], atomic: bool) -> PushResult:
        with self.timings.step(step), self._reaching():
            return gitremote.push(self.repo, self.remote, updates, atomic=atomic, via=self.via)

    def close(self) -> None:
        """Delete our presence (unless the remote stopped answering: a stop does not
        wait on it; peers sweep it in time), and end the shared SSH connections (the
        engine's git commands are done)."""
        if not self.stats.unreachable_since:
            self.upkeep.leave()
        self.ssh.close()
