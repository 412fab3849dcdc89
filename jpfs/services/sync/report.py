"""What ``daemon status`` says of a shared record: the ``sync`` object
(protocol/sync.md, "A tour"), read from one engine while its cycles go on."""

from __future__ import annotations

import time
from typing import Any

from jpfs.errors import JpfsError
from jpfs.infra.git import refs
from jpfs.services.sync.engine import SyncEngine


def status(engine: SyncEngine) -> dict[str, Any]:
    held = engine.book.held()
    try:
        ahead, behind = refs.ahead_behind(
            engine.repo, f"refs/heads/{engine.branch}", engine.track_record
        )
    except JpfsError:
        ahead = behind = -1  # the repository cannot say now; the cycle reports why
    return {
        "remote": engine.remote,
        "machine": engine.machine,
        "incarnation": engine.incarnation,
        "ahead": ahead,
        "behind": behind,
        "leases_held": sorted(lease.conv_id for lease in held),
        "leases_on_remote": engine.book.remote_count(),
        **engine.stats.report(time.time()),
        "timings": engine.timings.snapshot(),
    }
