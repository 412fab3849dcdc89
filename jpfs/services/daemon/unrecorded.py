"""Failures the daemon could not write into their conversation: kept, said, tried again
a few times, then left alone.

When a run fails and its error cannot be written where it belongs (the conversation's
own files refuse it: see :mod:`jpfs.core.failures`), the failure is kept on this
machine at once, so ``jpfs tree``, ``c show``, ``daemon status`` and ``jpfs doctor``
show the conversation failed, with the reason, and the daemon does not run it again.
Writing the error into the conversation is tried again after 2, 4, 8, 16 and 32
seconds (a fault that passes, a disk freed); then the daemon stops trying: the kept
failure stays until the conversation's files change or ``jpfs retry``.
"""

from __future__ import annotations

import logging
import threading
import time

from jpfs.core import failures, locks
from jpfs.core.conversation import Conversation
from jpfs.core.workspace import Workspace
from jpfs.errors import JpfsError, LockError, RepositoryFault
from jpfs.services.daemon import actions

log = logging.getLogger("jpfs.services.daemon")

# Seconds before each further try to write the failure into its conversation.
RETRIES = (2.0, 4.0, 8.0, 16.0, 32.0)


class Unrecorded:
    def __init__(self, ws: Workspace, retries: tuple[float, ...] = RETRIES) -> None:
        self.ws = ws
        self.retries = retries
        self._lock = threading.Lock()  # the pool's threads keep; the loop's thread retries
        self._due: dict[str, tuple[float, int, str]] = {}  # id -> (when, tries made, message)

    def keep(self, conv: Conversation, message: str, exc: Exception) -> None:
        """``conv`` failed with ``message``, which ``exc`` kept out of its files."""
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        failures.keep(self.ws.local_dir, conv, message, why)
        log.error(
            "%s: its failure could not be written into it (%s); kept in .jpfs/local/%s and"
            " shown as failed; trying again in %g s",
            conv.id, why, failures.DIR, self.retries[0],
        )  # fmt: skip
        with self._lock:
            self._due[conv.id] = (time.monotonic() + self.retries[0], 0, message)

    def tick(self) -> None:
        """Try again those that are due (the daemon's loop, about once a second)."""
        now = time.monotonic()
        with self._lock:
            due = [(c, tries, m) for c, (at, tries, m) in self._due.items() if at <= now]
        for conv_id, tries, message in due:
            self._again(conv_id, tries + 1, message)

    def _again(self, conv_id: str, tries: int, message: str) -> None:
        conv = Conversation(self.ws.conv_root, conv_id)
        if failures.of(self.ws.local_dir, conv) is None:
            self._forget(conv_id)  # its files changed: looked at from them again
            return
        try:
            with locks.conversation_lock(self.ws.local_dir, conv_id):
                actions.record_failure(self.ws, conv, message)
        except LockError:
            self._schedule(conv_id, tries - 1, message, 1.0)  # busy: soon, not a try
            return
        except RepositoryFault:
            self._forget(conv_id)  # written, not committed: the next look commits it
            return
        except (JpfsError, OSError) as exc:
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            # Again as its files are now: the try itself may have touched them.
            failures.keep(self.ws.local_dir, conv, message, why)
            if tries < len(self.retries):
                log.info("%s: its failure still cannot be written into it: %s", conv_id, why)
                self._schedule(conv_id, tries, message, self.retries[tries])
                return
            log.error(
                "%s: gave up writing its failure into it after %d tries (%s); it stays"
                " failed here until its files change, or `jpfs retry %s`",
                conv_id, tries, why, conv_id,
            )  # fmt: skip
            self._forget(conv_id)
            return
        log.info("%s: its failure is written into it at last", conv_id)
        self._forget(conv_id)

    def pending(self) -> list[str]:
        """The conversations whose failure is still to be tried again."""
        with self._lock:
            return sorted(self._due)

    def _schedule(self, conv_id: str, tries: int, message: str, delay: float) -> None:
        with self._lock:
            self._due[conv_id] = (time.monotonic() + delay, tries, message)

    def _forget(self, conv_id: str) -> None:
        with self._lock:
            self._due.pop(conv_id, None)
