"""What becomes of a run that did not end in a state of its own: failed, or postponed.

The conversation at fault *fails*: an error event in it, or, when its own files refuse
one, the failure kept where jpfs can write (:mod:`jpfs.services.daemon.unrecorded`). The
machine at fault (its repository or disk, :class:`~jpfs.errors.RepositoryFault`)
*postpones* it: no error event, its run tried again from its files after 1, 2, 4 ...
seconds (at most a minute). Either way, once the pool is done with a conversation, the
reconciler is told when to look at it again (:meth:`Outcomes.done`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from jpfs.core.conversation import Conversation
from jpfs.core.workspace import Workspace
from jpfs.errors import JpfsError, RepositoryFault
from jpfs.services.daemon import actions, process
from jpfs.services.daemon.backoff import Backoff
from jpfs.services.daemon.lasterror import LastError
from jpfs.services.daemon.unrecorded import Unrecorded

log = logging.getLogger("jpfs.services.daemon")

# A run stopped by a repository fault (or a failure written but not committed) is tried
# again after 1, 2, 4 ... seconds, at most this many: soon after the user frees the disk,
# without spinning while it stays full.
FAULT_RETRY_MAX = 60.0


class Outcomes:
    def __init__(
        self,
        ws: Workspace,
        stats: process.Stats,
        errors: LastError,
        unrecorded: Unrecorded,
        look_again: Callable[[str, float], None],
    ) -> None:
        """``look_again(conv_id, after)``: the reconciler's, once a run is over."""
        self.ws, self.stats, self.errors, self.unrecorded = ws, stats, errors, unrecorded
        self.look_again = look_again
        # conversation id -> the wait before the next try after a repository fault or a
        # failure that could not be committed
        self.backoff = Backoff(first=1.0, most=FAULT_RETRY_MAX)
        self._retry_after: dict[str, float] = {}

    def fail(self, conv: Conversation, message: str) -> None:
        self.stats.failures += 1
        self.errors.record(f"{conv.id}: {message}", conv.id, failed=True)
        log.warning("%s: failed: %s", conv.id, message)
        try:
            actions.record_failure(self.ws, conv, message)
        except RepositoryFault as exc:
            # Written, not committed: its files say it; the commit waits for the repository.
            delay = self._back_off(conv.id)
            log.error("%s: could not commit the failure (again in %g s): %s", conv.id, delay, exc)
        except (JpfsError, OSError) as exc:
            # Its own files refuse it: kept where jpfs can write, so that every view shows
            # it failed and it is not run, and failed, again and again.
            self.unrecorded.keep(conv, message, exc)

    def postpone(self, conv: Conversation, exc: RepositoryFault) -> None:
        """The repository failed under the run: the conversation is not at fault, so no
        error event; the run is tried again later, from its files, with backoff."""
        delay = self._back_off(conv.id)
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        self.errors.record(f"{conv.id}: {first} (trying again in {delay:g} s)", conv.id)
        log.warning("%s: repository fault, trying again in %g s: %s", conv.id, delay, first)

    def went_through(self, conv_id: str) -> None:
        """A run of ``conv_id`` ended in a state: its next fault waits a second again."""
        self.backoff.forget(conv_id)

    def _back_off(self, conv_id: str) -> float:
        """Seconds until ``conv_id`` is looked at again: doubled at each fault in a row."""
        delay = self._retry_after[conv_id] = self.backoff.next(conv_id)
        return delay

    def look_again_in(self, conv_id: str, seconds: float) -> None:
        self._retry_after[conv_id] = seconds

    def done(self, conv_id: str) -> None:
        """The pool is done with ``conv_id``: the reconciler looks at it again (at once,
        or when a fault's backoff or a claim's wait says)."""
        self.look_again(conv_id, self._retry_after.pop(conv_id, 0.0))
