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


def fetches(status: Path) -> int:
    sync = shown(status).get("sync") or {}
    return int(sync.get("timings", {}).get("fetch", {}).get("count", 0))  # type: ignore[attr-defined]


def test_the_syncs_moving_times_are_refreshed_every_two_seconds_not_every_cycle(
    tmp_path: Path, ws: Path, cli: Callable[..., Result]
) -> None:
    share_record(tmp_path, ws, cli, interval="0.25")
    status = ws / ".jpfs" / "local" / "daemon.json"
    with running_daemon(ws):
        wait_until(lambda: fetches(status) >= 1, timeout=30, message="a first fetch shown")
        before = fetches(status)
        # Watch the file over 5 s of cycles (about 20 fetches): each rewrite is a new inode.
        seen: set[tuple[int, int]] = set()
        end = time.monotonic() + 5.0
        while time.monotonic() < end:
            try:
                stat = os.stat(status)
            except FileNotFoundError:
                continue
            seen.add((stat.st_ino, stat.st_mtime_ns))
            time.sleep(0.01)  # sampling the file over a window, not waiting for it
        after = fetches(status)
        assert after - before >= 8, (before, after)  # the times did move on in the file
        # Every 2 s over 5 s, and the first one seen: 4 at most; every cycle would be ~20.
        assert len(seen) <= 4, (len(seen), before, after)
