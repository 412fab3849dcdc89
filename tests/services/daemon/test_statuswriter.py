"""daemon.json as a shared daemon writes it: the sync's cycles move its times on four
times a second, and the file is rewritten for them only every 2 s (each rewrite is a
file creation on every shared daemon)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from tests.conftest import Result, running_daemon, share_record, wait_until


def shown(status: Path) -> dict[str, object]:
    try:
        return dict(json.loads(status.read_text(encoding="utf-8")))
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def said_present(status: Path) -> bool:
    """Its presence pushed (a step in the timings) and fetched back (listed)."""
    sync = shown(status).get("sync") or {}
    return "present" in sync.get("timings", {}) and bool(sync.get("present"))  # type: ignore[operator,attr-defined]


def fetches(status: Path) -> int:
    sync = shown(status).get("sync") or {}
    return int(sync.get("timings", {}).get("fetch", {}).get("count", 0))  # type: ignore[attr-defined]


def test_the_syncs_moving_times_are_refreshed_every_two_seconds_not_every_cycle(
    tmp_path: Path, ws: Path, cli: Callable[..., Result]
) -> None:
    share_record(tmp_path, ws, cli, interval="0.25")
    status = ws / ".jpfs" / "local" / "daemon.json"
    with running_daemon(ws):
        # Its first cycle's news first: a first fetch, and its presence said on the
        # remote (a new step in the timings, this machine among those present); each is
        # a change, rewritten within 0.25 s, not a time moving on. Counted among the
        # sampled rewrites, they made 5 in 4.5 s once in CI (at most 4.2 allowed).
        wait_until(
            lambda: fetches(status) >= 1 and said_present(status),
            timeout=30,
            message="a first fetch and the presence shown",
        )
        before = fetches(status)
        # Each rewrite is a new file (a new inode); sampled while the file shows 16 more
        # fetches (4 s of cycles or more).
        seen: set[tuple[int, int]] = set()

        def sixteen_more() -> bool:
            try:
                stat = os.stat(status)
            except FileNotFoundError:
                return False
            seen.add((stat.st_ino, stat.st_mtime_ns))
            return fetches(status) - before >= 16

        started = time.monotonic()
        wait_until(sixteen_more, timeout=60, message="16 more fetches shown")
        elapsed = time.monotonic() - started
        # Every 2 s, and the one seen first; a rewrite every cycle would be 16 or more.
        assert len(seen) <= elapsed / 2 + 2, (len(seen), elapsed, before)
