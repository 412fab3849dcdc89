"""The agent pool: at most ``size`` runs at once, picked fairly across subtrees.

Conversations wait in a :class:`FairQueue` grouped by their top-level conversation
(the first id segment) and served round-robin, so a tree that spawns hundreds of
children does not starve a human's single new task. A conversation is queued at most
once; one that is running is not queued again: when a run ends, the ``done``
callback looks at the conversation again and decides, from the files, whether it
needs another run.

With peers sharing the record, a run starts with a claim, a round trip to the remote
on the path of every turn. So beside its ``size`` run slots the pool may take up to
``ahead`` conversations *ahead*: a worker beyond the slots pops one, claims it while
the runs go on, and waits (phase ``"ready"``) for the next slot; a run ending hands its
slot over at once. Only while ``spare(queued)`` says so (the shared record's estimate:
one more claim ahead still leaves every peer at work the free work its next runs
want), and once the runs taken in a slot have started (made their first model call,
:meth:`Pool.calling`): near the end of the work, a
conversation claimed ahead would wait here for a slot while another machine sat idle
(protocol/sync.md, "While every peer keeps its share, the next claims are made
ahead").
What ``spare`` says changes with each fetch of the peers' leases: :meth:`Pool.reconsider`.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

log = logging.getLogger("jpfs.services.daemon.pool")

# How many groups a preferring pop looks at before it takes the first.
PREFER_SCAN = 64
# A run is starting until its first model call is out, or this long after it began to
# run (one resumed with tool calls pending runs them first).
LAUNCH_MAX = 1.0


class FairQueue:
    """FIFO within a group, round-robin across groups; no duplicates."""

    def __init__(self) -> None:
        self._groups: OrderedDict[str, deque[str]] = OrderedDict()
        self._members: set[str] = set()

    @staticmethod
    def group_of(conv_id: str) -> str:
        return conv_id.split("/", 1)[0]

    def __len__(self) -> int:
        return len(self._members)

    def __contains__(self, conv_id: object) -> bool:
        return conv_id in self._members

    def __iter__(self) -> Iterator[str]:
        """The queued ids, in no particular order."""
        return iter(self._members)

    def push(self, conv_id: str) -> bool:
        if conv_id in self._members:
            return False
        self._members.add(conv_id)
        self._groups.setdefault(self.group_of(conv_id), deque()).append(conv_id)
        return True

    def pop(self, rank: Callable[[str], tuple[int, int]] | None = None) -> str | None:
        """The oldest id of the group whose turn it is; that group goes to the back.
        ``rank``: of the next groups' oldest ids (only the first :data:`PREFER_SCAN`: a
        pop stays cheap), the first of those ranked lowest; one ranked ``(0, ...)`` at
        once."""
        chosen = next(iter(self._groups), None)
        if rank is not None:
            best: tuple[int, int] | None = None
            for group in itertools.islice(self._groups, PREFER_SCAN):
                score = rank(self._groups[group][0])
                if best is None or score < best:
                    best, chosen = score, group
                if best[0] == 0:
                    break
        if chosen is None:
            return None
        items = self._groups[chosen]
        conv_id = items.popleft()
        self._members.discard(conv_id)
        if items:
            self._groups.move_to_end(chosen)
        else:
            del self._groups[chosen]
        return conv_id

    def clear(self) -> list[str]:
        dropped = list(self._members)
        self._groups.clear()
        self._members.clear()
        return dropped


@dataclass
class Job:
    conv_id: str
    started: float = field(default_factory=time.time)
    stopping: threading.Event = field(default_factory=threading.Event)
    cancel: threading.Event = field(default_factory=threading.Event)
    # Filled by the run function for the status view.
    info: dict[str, object] = field(default_factory=dict)
    # Set by the run function: "starting" (taken from the queue: claimed, adopted),
    # "running" (a run under way), "ended" (its worker about to take the next); by the
    # pool: "ahead" (taken beyond the run slots: being claimed), "ready" (claimed ahead,
    # waiting for a slot, Pool.wait_turn).
    phase: Literal["starting", "running", "ended", "ahead", "ready"] = "starting"
    slot: bool = False  # holds one of the pool's ``size`` run slots
    # While running: when it began to (monotonic), and whether its model call is out.
    ran_at: float = 0.0
    called: bool = False


RunFn = Callable[[Job], None]
DoneFn = Callable[[str], None]


class Pool:
    """Worker threads that call ``run(job)`` for queued conversations."""

    def __init__(self, size: int, run: RunFn, done: DoneFn) -> None:
        self.size = max(1, size)
        self._run = run
        self._done = done
        self._queue = FairQueue()
        self._running: dict[str, Job] = {}
        self._cv = threading.Condition()
        self._closing = False
        self._workers = 0  # live worker threads; above size + ahead they retire when idle
        self._threads: list[threading.Thread] = []
        self._slotted = 0  # jobs holding a run slot
        self._ahead = 0  # jobs taken ahead, not holding one yet
        # With peers sharing the record: how late this machine should start each queued
        # conversation (0: first; see Claimer.rank), so that claims seldom collide.
        self.rank: Callable[[str], tuple[int, int]] | None = None
        self.ahead = 0  # how many may be taken ahead of a slot (see the module)
        # The longest one taken ahead waits for a slot before it lets go (None: no end).
        self.hold_max: float | None = None
        # Whether the queue has work to spare for one more taken ahead (see the module).
        self.spare: Callable[[FairQueue], bool] = lambda queued: False
        with self._cv:
            self._add_workers(self.size)

    def _add_workers(self, count: int) -> None:
        for _ in range(count):
            t = threading.Thread(
                target=self._worker, name=f"jpfs-agent-{len(self._threads)}", daemon=True
            )
            self._threads.append(t)
            self._workers += 1
            t.start()

    def resize(self, size: int, ahead: int | None = None) -> None:
        """Run at most ``size`` at once from now on (and take up to ``ahead`` more ahead,
        when given): more workers start at once; surplus ones retire when their run ends
        (a run in flight is never interrupted)."""
        with self._cv:
            self.size = max(1, size)
            self.ahead = self.ahead if ahead is None else max(0, ahead)
            wanted = self.size + self.ahead
            if not self._closing and self._workers < wanted:
                self._add_workers(wanted - self._workers)
            self._cv.notify_all()

    # -- the reconciler's side -------------------------------------------------------
    def submit(self, conv_id: str) -> bool:
        with self._cv:
            if self._closing:
                return False
            if conv_id in self._running:
                return False
            if self._queue.push(conv_id):
                self._cv.notify()
                return True
            return False

    def is_running(self, conv_id: str) -> bool:
        with self._cv:
            return conv_id in self._running

    def busy(self, conv_id: str) -> bool:
        """Queued or running here: the pool will look at it, nobody else needs to."""
        with self._cv:
            return conv_id in self._running or conv_id in self._queue

    def snapshot(self) -> tuple[list[Job], int]:
        """The jobs taken (running, starting, or taken ahead), and how many are queued."""
        with self._cv:
            return list(self._running.values()), len(self._queue)

    def cancel(self, conv_id: str) -> None:
        """Stop the run of ``conv_id`` at once, or its start if it waits for a slot."""
        with self._cv:
            job = self._running.get(conv_id)
            if job is not None:
                job.cancel.set()
                self._cv.notify_all()

    def reconsider(self) -> None:
        """What :attr:`spare` answers may have changed (a fetch brought the peers'
        leases): idle workers ask again."""
        with self._cv:
            if len(self._queue) and self._ahead < self.ahead:
                self._cv.notify_all()

    def waiting(self) -> set[str]:
        """The conversations taken ahead: claimed, or being claimed, no run under way."""
        with self._cv:
            return {job.conv_id for job in self._running.values() if not job.slot}

    def calling(self, job: Job) -> None:
        """``job``'s run made a model call (the run function says so): it has started,
        and what waited for that goes on (:meth:`_launching`)."""
        with self._cv:
            if not job.called:
                job.called = True
                self._cv.notify_all()

    def _launching(self) -> bool:
        """Whether a run is starting here: taken from the queue, or running with its
        first model call not out yet (for at most :data:`LAUNCH_MAX`). Claims ahead and
        the sync cycle wait for it: its way to the model is on the turn's path, theirs
        is not."""
        return any(job.phase == "starting" for job in self._running.values()) or bool(
            self._launch_wait()
        )

    def _launch_wait(self) -> float | None:
        """How long until no running job is left launching (None: none is now); a
        waiting worker looks again then, if no call woke it before."""
        now, left = time.monotonic(), None
        for job in self._running.values():
            if job.phase == "running" and not job.called:
                rest = job.ran_at + LAUNCH_MAX - now
                if rest > 0:
                    left = rest if left is None else max(left, rest)
        return left

    def starting(self) -> bool:
        """Whether a run is about to start here: a job taken from the queue and not
        running yet, or running with its first model call not out yet
        (:meth:`_launching`), or work queued with a worker free (or whose run just
        ended)."""
        with self._cv:
            jobs = self._running.values()
            if self._launching():
                return True
            busy = sum(1 for job in jobs if job.phase == "running")
            return bool(len(self._queue)) and busy < self.size

    def full(self) -> bool:
        """Whether every worker is running a run: nothing more starts here before one
        ends (the sync thread then needs no news of new work)."""
        with self._cv:
            running = sum(1 for job in self._running.values() if job.phase == "running")
            return running >= self.size

    def _may_take_ahead(self) -> bool:
        """Room to take one ahead, once every run taken in a slot has started (their
        claims and first model calls are on their turns' path: those ahead are not), and
        with work to spare."""
        if self._ahead >= self.ahead:
            return False
        if self._launching():
            return False
        return self.spare(self._queue)

    def _hand_over(self) -> None:
        """A run's slot is free: to the job claimed ahead that has waited longest, if
        any (else this worker, looking for work next, would take it first)."""
        ready = [job for job in self._running.values() if job.phase == "ready"]
        if not ready or self._slotted > self.size:  # shrunk meanwhile: the slot goes
            self._slotted -= 1
            return
        self._slotted -= 1
        self._promote(min(ready, key=lambda job: job.started))

    def _promote(self, job: Job) -> None:
        """``job``, taken ahead, takes a run slot (one is free)."""
        job.slot, job.phase = True, "starting"
        self._slotted += 1
        self._ahead -= 1

    def wait_turn(self, job: Job) -> bool:
        """Before a run starts: for a job taken ahead, wait for a run slot, at most
        :attr:`hold_max` from its pop (False: stopped, cancelled or out of time
        meanwhile, the job must not run; its conversation is looked at again); a job
        taken in a slot goes on at once. Either way the job is ``"running"`` from here."""
        deadline = None if self.hold_max is None else job.started + self.hold_max
        with self._cv:
            while not job.slot:
                if self._closing or job.stopping.is_set() or job.cancel.is_set():
                    return False
                if self._slotted < self.size:
                    self._promote(job)
                    break
                left = None if deadline is None else deadline - time.time()
                if left is not None and left <= 0:
                    # The runs here outlast it: held longer, it could keep a machine
                    # whose runs end sooner from the work (protocol/sync.md).
                    log.info("%s: claimed ahead, no run slot for %gs; let go", job.conv_id,
                             self.hold_max)  # fmt: skip
                    return False
                job.phase = "ready"
                self._cv.wait(left)
            if job.cancel.is_set():
                return False
            job.phase, job.ran_at = "running", time.monotonic()
            self._cv.notify_all()  # running: what waits on a start looks again
            return True

    # -- shutting down -----------------------------------------------------------------
    def stop(self) -> None:
        """Graceful: drop the queue, let each run finish its current step."""
        with self._cv:
            self._closing = True
            dropped = self._queue.clear()
            for job in self._running.values():
                job.stopping.set()
            self._cv.notify_all()
        if dropped:
            log.info("stopping: %d queued conversation(s) left for the next start", len(dropped))

    def force(self) -> None:
        """Interrupt the steps in flight too (a second signal)."""
        self.stop()
        with self._cv:
            for job in self._running.values():
                job.cancel.set()

    def join(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self._threads:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            t.join(left)
        return not any(t.is_alive() for t in self._threads)

    # -- workers -------------------------------------------------------------------------
    def _worker(self) -> None:
        while True:
            with self._cv:
                while not self._closing and self._workers <= self.size + self.ahead:
                    if len(self._queue) and self._slotted < self.size:
                        slot = True
                        break
                    if len(self._queue) and self._may_take_ahead():
                        slot = False
                        break
                    # Woken by new work, a run's end (a slot), a run's first call, a
                    # resize or the stop; or when a run's start may no longer hold it.
                    self._cv.wait(self._launch_wait() if len(self._queue) else None)
                if self._closing:
                    return
                if self._workers > self.size + self.ahead:
                    self._workers -= 1
                    return
                conv_id = self._queue.pop(self.rank)
                if conv_id is None:
                    continue
                job = Job(conv_id, slot=slot, phase="starting" if slot else "ahead")
                self._slotted += slot
                self._ahead += not slot
                self._running[conv_id] = job
            try:
                self._run(job)
            except Exception:
                log.exception("run of %s crashed", conv_id)
            finally:
                with self._cv:
                    del self._running[conv_id]
                    if job.slot:
                        self._hand_over()
                    else:
                        self._ahead -= 1
                    self._cv.notify_all()  # a slot, or room to take one ahead
                    closing = self._closing
            if not closing:
                self._done(conv_id)
