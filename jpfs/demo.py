"""``make demo``: the main job end to end, offline, in a throwaway repository.

A human asks the scripted ``demo`` agent for a summary; the agent interviews the
human first (onboarding), then delegates to two helper sub-agents that run in
parallel and read files, and answers. Every step is a commit; the demo prints the
conversation tree, the answer and ``jpfs log``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path


def sh(args: list[str], cwd: Path, *, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, text=True, capture_output=True, check=check)


def jpfs(cwd: Path, *args: str, show: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "jpfs", *args], cwd=cwd, text=True, capture_output=True, check=False
    )
    if show:
        print(f"\n$ jpfs {' '.join(args)}")
        if proc.stdout.strip():
            print(proc.stdout.rstrip())
    if proc.returncode not in (0, 4):
        print(proc.stderr, file=sys.stderr)
        raise SystemExit(f"demo failed: jpfs {' '.join(args)} exited {proc.returncode}")
    return proc


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="jpfs-demo-"))
    repo = root / "project"
    repo.mkdir()
    env_ok = (
        os.environ.get("GIT_AUTHOR_NAME")
        or sh(["git", "config", "user.name"], repo, check=False).stdout
    )
    sh(["git", "init", "-q", "-b", "main"], repo)
    if not env_ok:
        sh(["git", "config", "user.name", "Demo User"], repo)
        sh(["git", "config", "user.email", "demo@example.invalid"], repo)
    (repo / "README.md").write_text("# Tiny shop\nA web shop in one file.\n", encoding="utf-8")
    (repo / "src").mkdir()
    (repo / "src" / "app.py").write_text("def checkout(cart):\n    return sum(cart)\n", "utf-8")
    sh(["git", "add", "-A"], repo)
    sh(["git", "commit", "-q", "-m", "A tiny project"], repo)
    print(f"demo repository: {repo}")

    jpfs(repo, "init")
    asked = jpfs(repo, "query", "--new", "--agent", "demo", "--non-interactive",
                 "Summarise this repository for a new contributor")  # fmt: skip
    conv = asked.stdout.split('"')[1]
    jpfs(repo, "answer", conv, "Focus on src/: the checkout code.", "--run")
    jpfs(repo, "conversation", "ls", "--tree")
    jpfs(repo, "log")
    print("\n$ git log --oneline | head -5")
    print(sh(["git", "log", "--oneline", "-5"], repo).stdout.rstrip())
    print(f"\nEverything above is plain files and commits in {repo}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
