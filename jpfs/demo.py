"""``make demo``: the main job end to end, offline, in a throwaway repository.

A human writes ``task.md`` in a new conversation directory, as in any editor. The
background daemon notices, and the scripted ``demo`` agent interviews the human
first (``questions.md``). The human answers in ``answers.md``; the agent then
delegates to two helper sub-agents that run in parallel and read files, and writes
``result.md``. Every step is a commit; the demo prints the files, the conversation
tree and ``jpfs log``. No API key or network is needed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from jpfs.infra import git


def jpfs(cwd: Path, *args: str, show: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "jpfs", *args], cwd=cwd, text=True, capture_output=True, check=False
    )
    if show:
        print(f"\n$ jpfs {' '.join(args)}")
        if proc.stdout.strip():
            print(proc.stdout.rstrip())
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        raise SystemExit(f"demo failed: jpfs {' '.join(args)} exited {proc.returncode}")
    return proc


def wait_for(what: str, predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"demo failed: timed out waiting for {what}")
        pause.wait(0.05)


def save(path: Path, text: str) -> None:
    """Write like an editor does: a temporary file, then a rename.

    Not :mod:`jpfs.infra.atomic`: the demo plays a person at an editor, so the daemon
    must see an editor's swap file, not jpfs's own temporary names (which it skips)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.swp~")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    print(f"\n[editor] saved {path.name}:\n{text.rstrip()}")


def make_repo(root: Path) -> Path:
    repo = root / "project"
    repo.mkdir()
    git.run(repo, ["init", "-q", "-b", "main"])
    if not (
        os.environ.get("GIT_AUTHOR_NAME")
        or git.run(repo, ["config", "user.name"], check=False).stdout
    ):
        git.run(repo, ["config", "user.name", "Demo User"])
        git.run(repo, ["config", "user.email", "demo@example.invalid"])
    (repo / "README.md").write_text("# Tiny shop\nA web shop in one file.\n", encoding="utf-8")
    (repo / "src").mkdir()
    (repo / "src" / "app.py").write_text("def checkout(cart):\n    return sum(cart)\n", "utf-8")
    git.run(repo, ["add", "-A"])
    git.run(repo, ["commit", "-q", "-m", "A tiny project"])
    return repo


def main(argv: list[str] | None = None) -> int:
    """The demo in a new repository under the temporary directory, removed at the end
    unless ``--keep`` (``make demo KEEP=1``) asks to look around in it after."""
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--keep"]):
        print("usage: python -m jpfs.demo [--keep]", file=sys.stderr)
        return 2
    keep = args == ["--keep"]
    top = Path(tempfile.mkdtemp(prefix="jpfs-demo-"))
    try:
        return show(make_repo(top), keep)
    finally:
        if not keep:
            shutil.rmtree(top, ignore_errors=True)


def show(repo: Path, keep: bool) -> int:
    print(f"demo repository: {repo}")
    jpfs(repo, "init")
    # The offline default: task.md files written by hand go to the scripted agent.
    jpfs(repo, "config", "set", "conversations.default_agent", "demo")
    jpfs(repo, "daemon", "start")
    try:
        conv = repo / "conversations" / "summary"
        save(conv / "task.md", "Summarise this repository for a new contributor.\n")
        wait_for("questions.md", lambda: "## Round 1" in _read(conv / "questions.md"))
        print(f"\n[agent] wrote questions.md:\n{_read(conv / 'questions.md').rstrip()}")
        save(conv / "answers.md", "# Answers\n\n## Round 1\n\nFocus on src/: the checkout code.\n")
        wait_for("result.md", lambda: (conv / "result.md").exists(), timeout=120)
        print(f"\n[agent] wrote result.md:\n{_read(conv / 'result.md').rstrip()}")
        jpfs(repo, "tree")
        jpfs(repo, "log", "summary")
    finally:
        jpfs(repo, "daemon", "stop")
    record = repo / "conversations"
    print("\n$ git -C conversations log --format='%h %an: %s' -6   # the record, jpfs-record")
    print(git.run(record, ["log", "--format=%h %an: %s", "-6"]).stdout.rstrip())
    print("\n$ git log --format='%h %an: %s'   # your branch: untouched by jpfs")
    print(git.run(repo, ["log", "--format=%h %an: %s"]).stdout.rstrip())
    print("\n$ git status --short   # jpfs's project files, for you to commit")
    print(git.run(repo, ["status", "--short"]).stdout.rstrip())
    print(f"\nEverything above is plain files and commits in {repo}.")
    if not keep:
        print("(removed now; `make demo KEEP=1` keeps it to look around in)")
    return 0


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


if __name__ == "__main__":
    raise SystemExit(main())
