"""Every bench still runs: each in its smallest form, end to end, as ``make bench``
starts it (its own process, its own temporary workspaces).

Speed is measured by the benches and never asserted here. What this guards is that a
bench still drives the real runtime path after the code under it changed: a daemon's
warm-up line it waits for, a flag it passes, a size list it builds, the matches it
expects. A renamed log line once left three benches waiting until their deadline, and
``bench_cli`` expected half the grep matches its own tree held with two events per
conversation, both unseen by the suite."""

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
    "bench_refs": (["--rounds", "3"], "A cycle with nothing to do, in process"),
    "bench_query_start": (["--runs", "1"], "jpfs query, scripted zero, daemon running"),
    "bench_daemon": (
        ["--quick", "--tasks", "4", "--burst", "8", "--rounds", "1", "--tree", "100"],
        "daemon at 100 conversations",
    ),
    "bench_cli": (
        ["--conversations", "20", "--events", "2", "--repeat", "1", "--repeat-tree", "1"],
        "untracked scan after N conversations committed into",
    ),
    "bench_commit": (
        ["--files", "100", "--commits", "5", "--threads", "2", "--writes", "2"],
        "(threads: 2 x 2 writes; targets",
    ),
    "bench_listing": (["--sizes", "10", "--repeat", "1"], "Listings (warm cache; baseline"),
    "bench_record": (
        ["--commits", "5", "--threads", "2", "--writes", "2", "--conversations", "2"],
        "one index update of the record's index: jpfs's codec against libgit2",
    ),
    "bench_runtime": (
        ["--runs", "2", "--cli-runs", "1", "--fanout-runs", "1", "--children", "2", "--tree", "20"],
        "(a) with 20 conversations",
    ),
    "bench_cost": (["--turns", "3", "--sizes", "10"], "budgets.check before a model call"),
    "bench_context": (["--quick"], "12 files of 6 KiB, one read a call"),
    "bench_blame": (
        ["--lines", "20", "--conversations", "5", "--commits", "3", "--repeat", "1"],
        "CLI start-up alone",
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
