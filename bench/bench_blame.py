"""Benchmark ``jpfs blame`` against ``git blame`` of the same file, in the same run.

Usage: python bench/bench_blame.py [--lines 2000] [--conversations 1000] [--commits 200]
                                   [--repeat 15] [--quick]

Builds a workspace whose record holds ``--conversations`` conversations (6 events
each) and a project file of ``--lines`` lines written by ``--commits`` commits: four in
five by agents (subject, trailers and author as a branch writer's edit commit, each
naming two tool events and a turn, so blame reads those too), the rest by a person.
Then measures, interleaved:

* git: ``git blame FILE`` (the baseline);
* jpfs: :func:`jpfs.services.views.provenance.blame` in this process (blame
  --porcelain, one ``git log`` for the commits, then the named record files read in
  process, a pygit2 tree lookup each; the target is at most 2x git);
* cli: ``jpfs blame FILE --format json`` as a user runs it, bytecode cached as in an
  install (Python's and the CLI's start-up included);
* startup: ``jpfs blame --help``, the part of that which is start-up alone (Python,
  typer, the command's module; neither git nor the record is read).

``main(argv)`` returns the numbers as a dict for a bench runner.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    command,
    conversation_ids,
    git,
    make_workspace,
    measure_interleaved,
    ms,
    pin_environment,
    populate,
    print_machine,
    print_table,
    ratio,
    temp_dir,
    use_bytecode_cache,
)

FILE = "src/big.py"


def build_history(root: Path, lines: int, commits: int, conversations: list[str]) -> int:
    """``commits`` commits each rewriting a random run of ``FILE``'s lines; returns how
    many an agent wrote."""
    rng = random.Random(7)
    text = [f"line {i} = {i}" for i in range(lines)]
    path = root / FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    by_agent = 0
    for n in range(commits):
        if n == 0:
            start, size = 0, lines  # the first commit writes the whole file
        else:
            size = rng.randrange(1, max(2, lines // 20))
            start = rng.randrange(0, lines - size)
        for i in range(start, start + size):
            text[i] = f"line {i} = {n}  # rev {n}"
        path.write_text("\n".join(text) + "\n", encoding="utf-8")
        git(root, "add", FILE)
        env_author: list[str] = []
        if n % 5:
            conv = conversations[rng.randrange(len(conversations))]
            events = [f"{conv}/events/000{k}-{'user' if k % 2 else 'assistant'}.md" for k in (3, 5)]
            message = (
                f"jpfs({conv}): edit\n\nJpfs-Conversation: {conv}\nJpfs-Event: edit\n"
                f"Jpfs-Agent: impl\nJpfs-Event-Path: {events[0]}\nJpfs-Event-Path: {events[1]}\n"
                f"Jpfs-Turn: {conv}/events/0004-assistant.md\nJpfs-Model: claude-bench\n"
            )
            env_author = ["--author", "impl (jpfs agent) <impl@agents.jpfs.invalid>"]
            by_agent += 1
        else:
            message = f"human change {n}\n"
        git(root, "commit", "-q", *env_author, "-m", message)
    return by_agent


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--commits", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=None)
    args = parser.parse_args(argv)
    commits = args.commits or (100 if args.quick else 200)
    repeat = args.repeat or (7 if args.quick else 15)
    pin_environment()
    print_machine()
    from jpfs.core.workspace import open_workspace
    from jpfs.services.views import provenance

    with temp_dir() as tmp:
        use_bytecode_cache(tmp / "pycache")
        root = make_workspace(tmp / "ws")
        populate(root, args.conversations, 6)
        by_agent = build_history(root, args.lines, commits, conversation_ids(args.conversations))
        ws = open_workspace(root)
        rows = provenance.blame(ws.root, ws.record_branch, root, FILE)
        assert len(rows) == args.lines
        attributed = sum(1 for r in rows if r.conversation)
        assert attributed and all(r.task for r in rows if r.conversation)
        stats = measure_interleaved(
            {
                "git": command(["git", "blame", FILE], root),
                "jpfs": lambda: provenance.blame(ws.root, ws.record_branch, root, FILE),
                "cli": command(
                    [sys.executable, "-m", "jpfs", "blame", FILE, "--format", "json"], root
                ),
                "startup": command([sys.executable, "-m", "jpfs", "blame", "--help"], root),
            },
            repeat=repeat,
        )
    base = stats["git"].median
    print_table(
        f"blame of a {args.lines}-line file, {commits} commits ({by_agent} by agents),"
        f" {args.conversations}-conversation record; {attributed} lines by agents",
        ["", "median", "p99", "ratio to git blame (jpfs <= 2)"],
        [
            [name, ms(s.median), ms(s.p99), ratio(s.median, base)]
            for name, s in (("git blame", stats["git"]), ("jpfs (service)", stats["jpfs"]),
                            ("jpfs blame (CLI)", stats["cli"]),
                            ("CLI start-up alone", stats["startup"]))
        ],
    )  # fmt: skip
    result = {name: s.to_json() for name, s in stats.items()}
    result["ratio"] = stats["jpfs"].median / base
    result["cli_ratio"] = stats["cli"].median / base
    result.update(lines=args.lines, commits=commits, conversations=args.conversations)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
