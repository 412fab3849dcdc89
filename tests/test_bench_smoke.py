"""The benches that drive a daemon still run: each in its smallest form, end to end, as
``make bench`` starts it (its own process, its own temporary workspaces).

Speed is measured by the benches and never asserted here. What this guards is that a
bench still drives the real runtime path after the code under it changed: a daemon's
warm-up line it waits for, a flag it passes, a size list it builds. A renamed log line
once left three benches waiting until their deadline, unseen by the suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# bench -> (its smallest arguments, a line of the table it prints at the end)
SMALLEST = {
    "bench_sync": (
        ["--quick", "--conversations", "4", "--turn", "0.2", "--daemons", "1"],
        "4 conversations, model turn 0.2 s",
    ),
    "bench_query_start": (["--runs", "1"], "jpfs query, scripted zero, daemon running"),
    "bench_daemon": (
        ["--quick", "--tasks", "4", "--burst", "8", "--rounds", "1", "--tree", "100"],
        "daemon at 100 conversations",
    ),
}


@pytest.mark.parametrize("name", sorted(SMALLEST))
def test_a_bench_runs_to_its_last_table(name: str, tmp_path: Path) -> None:
    args, last_table = SMALLEST[name]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / f"{name}.py"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "TMPDIR": str(tmp_path)},  # its workspaces under this test's
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert last_table in proc.stdout, proc.stdout[-3000:]
