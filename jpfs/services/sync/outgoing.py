"""What one push of the sync cycle sends: the record when it adds to the remote's, and
every lease held, renewed or released to a tombstone naming the record that holds the
work done under it (protocol/sync.md, "A lease is released together with the work").

Assembled here, pushed by the engine (:meth:`SyncEngine.push`), in one atomic push: a
release never reaches the remote without its work, and a push made after one of our
leases was taken over fails whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from jpfs.infra.git import refs
from jpfs.infra.git.remote import Update
from jpfs.services.sync.leases import Lease, LeaseBook


@dataclass(frozen=True)
class Outgoing:
    updates: list[Update] = field(default_factory=list)
    renewing: dict[str, tuple[str, int]] = field(default_factory=dict)  # conv -> (value, seq)
    releasing: dict[str, tuple[str, str]] = field(
        default_factory=dict
    )  # conv -> (tombstone, record)


def sendable(repo: Path, forfeits: list[str], ours: str | None, theirs: str | None) -> bool:
    """Whether our record may go to the remote: it contains theirs (never force theirs
    away), and changes no forfeited conversation (a cancelled run's late turn, committed
    after the merge that took the new holder's version: the next merge takes theirs
    again, protocol/sync.md "A late write is rejected, not merged")."""
    if ours is None or theirs is None or ours == theirs:
        return True
    if not refs.is_ancestor(repo, theirs, ours):
        return False
    return not any(refs.changed_since_fork(repo, theirs, ours, conv_id) for conv_id in forfeits)


def assemble(
    book: LeaseBook,
    held: list[tuple[Lease, bool]],
    *,
    branch: str,
    ours: str | None,
    theirs: str | None,
    record: bool,
    leases: bool,
) -> Outgoing:
    """The updates of one push. ``held``: the leases held, each with whether its run is
    done (read before ``ours``, the record's tip here, so that it holds a done run's last
    commit); ``theirs``: the remote's tip as last fetched; ``record``: whether ours may
    go (it contains theirs: it is sent if it adds to it, and done leases are released
    naming it; else they are renewed); ``leases``: whether the leases go at all (with
    the record, or a renewal due)."""
    out = Outgoing()
    if record and ours is not None and ours != theirs:
        out.updates.append(Update(f"refs/heads/{branch}", ours, theirs))
    if not leases:
        return out
    for lease, done in held:
        if done and record and ours is not None:
            tombstone = book.tombstone(lease.conv_id, ours)
            out.releasing[lease.conv_id] = (tombstone, ours)
            out.updates.append(Update(lease.ref, tombstone, lease.oid))
        else:
            oid, seq = book.make(lease.conv_id)
            out.renewing[lease.conv_id] = (oid, seq)
            out.updates.append(Update(lease.ref, oid, lease.oid))
    return out
