"""Start-up chores that make a restart after SIGKILL safe.

* :func:`sweep_debris`: temporary files and directories of writers killed mid-way.
* :func:`ensure_ignore_file`: editors' swap files and jpfs's temporary files are
  git-ignored under the conversation root, so a commit of a whole conversation
  directory (the runtime snapshots it) never picks one up.
* :func:`break_dead_git_locks`: a git lock file (``index.lock``, the branch's ref lock)
  that no process holds open. The committer breaks locks it registered as its own;
  a SIGKILL between creating a lock and registering it (a window that grows to
  milliseconds when the committing thread waits for the GIL) leaves an anonymous one
  that would block every commit, the user's included. git and jpfs keep a lock file
  open for as long as they hold it, so a lock file that nobody has open and that is
  older than :data:`LOCK_MIN_AGE` has no holder left.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from pathlib import Path

import pygit2

from jpfs.committer import Change
from jpfs.daemon.procfs import open_files
from jpfs.workspace import Workspace

log = logging.getLogger("jpfs.daemon")

IGNORE_FILE = ".gitignore"
IGNORE_MARK = "# jpfs daemon: editors' swap/backup files and jpfs's temporary files"
IGNORE_LINES = ("*.jpfs-tmp", ".*.sw?", "*~", "4913", ".#*", "\\#*#", "*___jb_tmp___",
                "*___jb_old___", ".goutputstream-*")  # fmt: skip
LOCK_MIN_AGE = 1.0
_TMP_RE = re.compile(r"^\..*\.(\d+)\.jpfs-tmp$")
_GENERATED_RE = re.compile(r"^[a-z]{1,8}-[0-9a-hjkmnp-tv-z]{26}$")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_debris(ws: Workspace) -> int:
    """Delete what writers killed mid-way left under the root; returns how many.

    ``.NAME.PID.jpfs-tmp`` files whose writer is dead, and empty directories with a
    generated id (``c-01jh...``): a conversation killed between its ``mkdir`` and its
    ``conversation.toml``. A human never names a directory like that.
    """
    count = 0
    for top, _dirs, names in os.walk(ws.conv_root, topdown=False):
        for name in names:
            m = _TMP_RE.match(name)
            if m and not pid_alive(int(m.group(1))):
                try:
                    os.unlink(os.path.join(top, name))
                    count += 1
                except FileNotFoundError:
                    pass
        path = Path(top)
        # No age check: a creator still between mkdir and its first write recreates the
        # directory (writes make their parent directories), so removing it is harmless.
        if path != ws.conv_root and _GENERATED_RE.match(path.name) and not os.listdir(path):
            try:
                path.rmdir()
                count += 1
            except OSError:
                pass
    return count


def ensure_ignore_file(ws: Workspace) -> None:
    path = ws.conv_root / IGNORE_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    have = {line.strip() for line in text.splitlines()}
    missing = [line for line in IGNORE_LINES if line not in have]
    if not missing:
        return
    block = "\n".join(([IGNORE_MARK] if IGNORE_MARK not in have else []) + missing) + "\n"
    sep = "" if not text or text.endswith("\n") else "\n"
    path.write_text(text + sep + block, encoding="utf-8")
    rel = f"{ws.conv_root_rel}/{IGNORE_FILE}"
    ws.commit(Change((rel,), "jpfs: ignore editors' swap files", (("Jpfs-Event", "ignore"),)))


# -- git locks ----------------------------------------------------------------------------


def git_lock_files(root: Path) -> list[Path]:
    """The lock files a commit on the checked-out branch needs."""
    repo = pygit2.Repository(str(root))
    gitdir = Path(repo.path)
    common = gitdir
    try:
        common = (gitdir / (gitdir / "commondir").read_text().strip()).resolve()
    except FileNotFoundError:
        pass
    out = [gitdir / "index.lock", gitdir / "HEAD.lock", common / "packed-refs.lock"]
    head = repo.references.get("HEAD")
    target = head.target if head is not None else None
    if isinstance(target, str) and target.startswith("refs/"):
        out.append(common / f"{target}.lock")
    return out


def break_dead_git_locks(ws: Workspace) -> list[Path]:
    """Remove lock files of the branch's commit path that nobody holds; returns them."""
    broken = []
    pause = threading.Event()
    for path in git_lock_files(ws.root):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        age = time.time() - st.st_mtime
        if age < LOCK_MIN_AGE:
            # Young: a live holder may be between writing and renaming it; look again.
            pause.wait(LOCK_MIN_AGE - age)
            if not path.exists():
                continue
        if open_files([path]):
            continue
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue
        log.warning("removed %s: no process holds it (left by a killed process)", path)
        broken.append(path)
    return broken
