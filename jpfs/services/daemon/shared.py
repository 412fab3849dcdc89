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
from collections.abc import Callable, Iterable

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

# How many queued conversations plenty() looks at, per free one it wants.
_PLENTY_SCAN = 8


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
        self.engine = SyncEngine(ws, on_lost=self._lost, on_moved=record_moved)
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

    def plenty(self, queued: Iterable[str]) -> bool:
        """Whether at least twice as many of ``queued`` look free (no lease seen, none
        lost since) as the machines at work could start at once (each with this pool's
        size): then every machine claiming that many ahead still leaves each of their
        workers a conversation when its run ends, even if a fetch's worth of their
        claims is not in our view yet, and a conversation claimed ahead keeps nobody
        waiting (:mod:`jpfs.services.daemon.pool`). Near the end of the work it would:
        a machine idle then could start it, where here it waits for a run to end."""
        claimer = self.engine.claimer
        machines = len(self.engine.stats.working | {self.engine.machine})
        wanted = 2 * machines * self.pool.size
        found = 0
        # Asked under the pool's lock at every run's end: a queue of thousands held
        # elsewhere is not walked whole; so few free among the first is not plenty.
        for conv_id in itertools.islice(queued, _PLENTY_SCAN * wanted):
            found += claimer.looks_free(conv_id)
            if found >= wanted:
                return True
        return False
