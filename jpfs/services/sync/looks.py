"""Looks: a ``git://`` remote's record and leases listed in the process, to skip what a
fetch would not change.

A sharing daemon's cycle fetches every ``sync.interval``, and most fetches find
nothing new; an idle daemon also wants new work before the next cycle. A look
(:func:`jpfs.infra.git.wire.list_refs`, one connection, no program started) answers
both: whether the remote's record moved, and whether its record and leases are the
ones the last fetch (or the cycle's own pushes, which update the same tracking refs)
left here, in which case the fetch is skipped and the tracking refs are read as they
are. Where there is no ``git://`` URL to look at, or the look fails, the fetch runs as
before and reports what went wrong.
"""

from __future__ import annotations

import logging
from pathlib import Path

from jpfs.errors import GitError
from jpfs.infra.git import refs, wire
from jpfs.services.sync.leases import LEASE_NS
from jpfs.services.sync.stats import Timings

log = logging.getLogger("jpfs.services.sync")


class Looks:
    def __init__(
        self,
        url: str | None,
        repo: Path,
        branch: str,
        tracking: tuple[str, str],
        *,
        timeout: float,
        timings: Timings,
    ) -> None:
        """``url``: the remote's ``git://`` URL (None: never look); ``tracking``: the
        ref a fetch writes the record to, and the prefix of those it writes leases to."""
        self.url, self.repo, self.timeout = url, repo, timeout
        self.record = f"refs/heads/{branch}"
        self.track_record, self.track_leases = tracking
        self.timings = timings

    def record_moved(self) -> bool:
        """Whether the remote's record is not the one last fetched. False where it
        cannot tell (no URL, no answer: the next cycle's fetch says why)."""
        listed = self._listed([self.record])
        tip = None if listed is None else listed.get(self.record)
        return tip is not None and tip != refs.resolve(self.repo, self.track_record)

    def unchanged(self, tracked: dict[str, tuple[str, str]]) -> bool:
        """Whether the remote's record and leases are the ones tracked here
        (``tracked``: the lease tracking refs, from :func:`refs.messages_under`): then
        a fetch would change nothing."""
        listed = self._listed([self.record, LEASE_NS])
        if listed is None:
            return False
        if listed.pop(self.record, None) != refs.resolve(self.repo, self.track_record):
            return False
        here = {
            LEASE_NS + ref.removeprefix(self.track_leases): oid for ref, (oid, _) in tracked.items()
        }
        return listed == here

    def _listed(self, prefixes: list[str]) -> dict[str, str] | None:
        if self.url is None:
            return None
        try:
            with self.timings.step("look"):
                return wire.list_refs(self.url, prefixes, timeout=self.timeout)
        except GitError as exc:
            log.debug("sync: looking at %s: %s", self.url, exc)
            return None
