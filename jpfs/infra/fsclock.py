"""The file system's clock, for caches that trust a stat stamp only once it has settled.

Timestamps come from a coarse clock (jiffies: 1-10 ms; a whole second on some file
systems): a second change within the same tick can leave a file's or directory's stamps
as they were. So, as git does with its index, a cache trusts a stamp later only if it is
older than the look that read it: than :data:`SETTLED_NS` before it began, and than the
file system's own time then (a probe file's mtime, set by the clock that stamps every
file, which may lag the wall clock).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

# Longer than a tick of the clock that stamps files (jiffies: 1-10 ms).
SETTLED_NS = 50_000_000


def settled_before(probe: Path | None) -> int:
    """A time (ns) before which no stamp can be repeated by a later change; touches
    ``probe`` (a file of the cache's own) to read the file system's time."""
    now = time.time_ns() - SETTLED_NS
    if probe is None:
        return now
    try:
        try:
            os.utime(probe)
        except FileNotFoundError:
            probe.touch()
        return min(now, os.stat(probe).st_mtime_ns)
    except OSError:
        return now
