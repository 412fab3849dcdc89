"""The daemon's side of a shared record (``sync.remote`` set): claim before acting.

With peers serving the same record, every write the daemon makes *for* a conversation
(adopting a bare ``task.md``, recording its error, running its turn) happens under that
conversation's lease (:meth:`SyncEngine.claim`), so it is done once across machines.
Human edits and mail are not claimed: they are files of their own, which merge.

The sync cycle runs on its own thread; a run's end wakes it, so results and the release
of their leases reach the remote at once rather than at the next interval.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet

from jpfs.core import record
from jpfs.core.conversation import Conversation
from jpfs.core.workspace import Workspace
from jpfs.errors import JpfsError
from jpfs.infra.git import refs
from jpfs.services.daemon import actions
from jpfs.services.daemon.actions import Need, Verdict
from jpfs.services.daemon.pool import Pool
from jpfs.services.sync import cycling
from jpfs.services.sync.claims import Claims
from jpfs.services.sync.engine import SyncEngine

log = logging.getLogger("jpfs.services.daemon")

# How many queued conversations spare() looks at, per free one it wants.
_SPARE_SCAN = 8


class SharedRecord:
    def __init__(
        self,
        ws: Workspace,
        pool: Pool,
        claims: Claims,
        *,
        look_again_in: Callable[[str, float], None],
        fail: Callable[[Conversation, str], None],
        record_moved: Callable[[str, str], None],
    ) -> None:
        self.ws = ws
        self.pool = pool
        self.look_again_in = look_again_in
        self.fail = fail
        self.engine = SyncEngine(
            ws,
            on_lost=self._lost,
            on_moved=record_moved,
            on_observed=pool.reconsider,
            announce=True,
        )
        self.engine.running = pool.is_running
        # The pool claims: in an order its peers seldom collide with, up to a claim
        # ahead per run slot while the peers keep their share, each held a lease at most.
        pool.rank = self.engine.claimer.pick
        pool.spare = self.spare
        pool.resize(pool.size, ahead=pool.size)
        pool.hold_max = self.engine.book.duration
        # jpfs query handed to this daemon and its runs' jp_query claim through it too.
        self.claims = claims
        claims.adopt(self.engine, ws)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        log.info(
            "sharing the record through %s as %s (incarnation %s)",
            self.engine.remote,
            self.engine.machine,
            self.engine.incarnation,
        )
        self._thread = threading.Thread(
            target=cycling.run,
            args=(self.engine, self._stop, self.pool.starting, self.pool.full, self.pool.waiting),
            name="jpfs-sync",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        self.claims.adopt(None, self.ws)
        self._stop.set()
        self.engine.wake.set()
        if self._thread is not None:
            self._thread.join(60.0)
        self.engine.close()

    def take(self, conv: Conversation, verdict: Verdict, held: contextlib.ExitStack) -> Verdict:
        """Claim ``conv`` and do what needs no model (adopt, record an error); the
        verdict left for the run, or NOTHING when another machine holds it."""
        ws = self.ws
        try:
            won = self.engine.claim(conv.id)
        except JpfsError as exc:
            log.warning("%s: cannot claim it on %s: %s", conv.id, self.engine.remote, exc)
            self.look_again_in(conv.id, self.engine.interval)
            return Verdict(Need.NOTHING)
        if not won:
            # The holder's results arrive by sync and wake us; if it died, its lease
            # expires and we look again then.
            self.look_again_in(conv.id, self.engine.wait_for(conv.id) + self.engine.interval)
            return Verdict(Need.NOTHING)
        held.callback(self.engine.release, conv.id)
        verdict = actions.needs(ws, conv)  # the files as the remote had them
        if verdict.need is Need.ADOPT:
            try:
                base = refs.resolve(ws.root, f"refs/heads/{ws.record_branch}")
                agent = actions.adopt(ws, conv, base)
                record.commit(ws, conv.id, "adopt")
                log.info("%s: new conversation from task.md (agent %s)", conv.id, agent)
            except JpfsError as exc:
                verdict = Verdict(Need.BROKEN, reason=str(exc).splitlines()[0])
            else:
                verdict = actions.needs(ws, conv)
        if verdict.need is Need.BROKEN:
            self.fail(conv, verdict.reason)
            return Verdict(Need.NOTHING)
        return verdict

    def _lost(self, conv_id: str) -> None:
        """Another machine took the lease over: stop our run of it at once."""
        self.pool.cancel(conv_id)

    def spare(self, queued: Iterable[str]) -> bool:
        """Whether one more claim ahead of ``queued`` leaves every peer at work enough
        free work for its next runs (:func:`free_wanted`; :mod:`.pool`)."""
        stats = self.engine.stats
        claimer = self.engine.claimer
        wanted = free_wanted(
            stats.peers, stats.working, self.engine.machine, self.pool.size, claimer.unseen()
        )
        found = 0
        # Asked under the pool's lock at every run's end: a queue of thousands held
        # elsewhere is not walked whole; so few free among the first is none to spare.
        for conv_id in itertools.islice(queued, _SPARE_SCAN * wanted):
            found += claimer.looks_free(conv_id)
            if found >= wanted:
                return True
        return False


def free_wanted(
    holding: Mapping[str, int], working: AbstractSet[str], me: str, size: int, unseen: int = 0
) -> int:
    """How many queued conversations must look free (no lease in our last fetch, no
    claim of ours lost since) for machine ``me`` to claim one more ahead: that one, and
    for each peer at work (``working``: holding leases, or releasing one lately) what
    it lacks of twice ``size``. A peer is taken to run ``size`` at once, like us, and
    to claim as many ahead: holding fewer leases (``holding``: machine -> leases in our
    view), it still wants the difference before its runs end. A claim of such a peer's
    not in our view yet counts as free work and as its want alike: a stale view asks the
    same. Once a claim of ours lost to it (``unseen``: such claims, lost since our view),
    it counts as neither: no longer free, and no longer wanted."""
    peers = working - {me}
    wants = sum(max(0, 2 * size - holding.get(machine, 0)) for machine in peers)
    return 1 + max(0, wants - unseen)
