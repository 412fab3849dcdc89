"""Moving a work tree from one commit to another with ``git read-tree -m -u``, git's
two-tree checkout: it updates only the files that differ and refuses to overwrite a
file edited and not committed yet. The record's sync and a fork's merge both move a
work tree this way, with the same retries (:func:`switch`)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from jpfs.infra.git.runner import run

# How long a caller that waits for a busy index lock waits at most.
LOCK_WAIT = 5.0


def switch(
    root: Path, old: str, new: str, *, lock_wait: float = 0.0
) -> subprocess.CompletedProcess[str]:
    """Move ``root``'s index and files from commit ``old`` to ``new``; git's answer
    (exit status 0: done). A refusal is tried again after the index's stat data is
    refreshed (stale, it makes read-tree take an unchanged file for an edit), and while
    the index lock is busy (a commit or another git command in flight) for up to
    ``lock_wait`` seconds: git's own answer to a busy lock file is to poll it."""
    args = ["read-tree", "-m", "-u", old, new]
    deadline, delay = time.monotonic() + lock_wait, 0.005
    proc = run(root, args, check=False)
    while proc.returncode != 0:
        run(root, ["update-index", "-q", "--refresh"], check=False)
        proc = run(root, args, check=False)
        if "index.lock" not in proc.stderr or time.monotonic() >= deadline:
            break
        time.sleep(delay)
        delay = min(delay * 2, 0.1)
    return proc
