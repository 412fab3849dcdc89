"""Shared helpers for the daemon tests: profiles, editor-style writes, a real daemon process.

The daemon mostly runs as a separate process started the way users start it
(``jpfs daemon start`` / ``jpfs daemon run``); tests drive it only through files and
read back files, git history and ``jpfs daemon status``. A few run it in process
(:func:`serving`), to put a bug in it or look at its threads.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.conftest import assert_fsck_clean, git, jpfs_subprocess, rgit, wait_until

if TYPE_CHECKING:
    from jpfs.services.daemon.service import Daemon

LEAD = """\
model = "script-lead"
provider = "script"
[tools]
allow = ["jp_query"]
agents = ["helper"]
[limits]
max_turns = 6
max_children = 4
[onboarding]
enabled = true
max_rounds = 2
[[script.onboarding]]
questions = ["Which part of the code matters?"]
[[script.turns]]
text = "Asking a helper."
tool_calls = [{ name = "jp_query", input = { config = "helper", query = "Look at the code." } }]
[[script.turns]]
text = "Final answer. {results}"
"""

HELPER = """\
model = "script-helper"
provider = "script"
[onboarding]
enabled = false
[script]
delay = {delay}
[[script.turns]]
text = "Helper says hello."
"""

WORKER = """\
model = "script-worker"
provider = "script"
[tools]
allow = ["jp_query"]
agents = ["helper"]
[onboarding]
enabled = false
[script]
delay = {delay}
[[script.turns]]
text = "Delegating."
tool_calls = [{ name = "jp_query", input = { config = "helper", query = "Help with it." } }]
[[script.turns]]
text = "Worker done."
"""

FAILING = """\
model = "script-failing"
provider = "script"
[onboarding]
enabled = false
[[script.turns]]
error = "the model is unavailable (scripted)"
"""

PROFILES = {"lead": LEAD, "helper": HELPER, "worker": WORKER, "failing": FAILING}


def setup_workspace(
    ws: Path, *, default_agent: str = "lead", delay: float = 0.0, cfg: dict[str, str] | None = None
) -> None:
    """Test profiles, allowed at the top level, plus config (committed like a user would)."""
    from jpfs.core.config import set_in_file

    agents = ws / ".jpfs" / "agents"
    for name, text in PROFILES.items():
        (agents / f"{name}.toml").write_text(text.replace("{delay}", str(delay)), encoding="utf-8")
    config = ws / ".jpfs" / "config.toml"
    set_in_file(config, "conversations.default_agent", f'"{default_agent}"')
    set_in_file(config, "agents.allowed", json.dumps(sorted(PROFILES)))
    for key, value in (cfg or {}).items():
        set_in_file(config, key, value)
    git(ws, "add", "-A", ".jpfs")
    git(ws, "commit", "-q", "-m", "test profiles")


# -- editor-style writes ---------------------------------------------------------------------


def write_in_place(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        fh.write(text)


def write_renamed(path: Path, text: str) -> None:
    """Save-by-rename (many editors, atomic savers): temp file, then rename over."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_vim(path: Path, text: str) -> None:
    """vim's save: swap file, the 4913 probe, backup by rename, write, cleanup."""
    path.parent.mkdir(parents=True, exist_ok=True)
    swap = path.with_name(f".{path.name}.swp")
    swap.write_bytes(b"b0VIM 9.0\0" + os.urandom(64))
    probe = path.with_name("4913")
    probe.touch()
    probe.unlink()
    backup = path.with_name(path.name + "~")
    if path.exists():
        os.rename(path, backup)
    with path.open("w", encoding="utf-8") as fh:
        fh.write(text)
    backup.unlink(missing_ok=True)
    swap.unlink()


# -- reading back --------------------------------------------------------------------------------


def log_lines(ws: Path, *paths: str) -> list[str]:
    """``author|subject`` of the record's commits (oldest first) touching record paths."""
    out = rgit(ws, "log", "--reverse", "--format=%an|%s", "--", *paths)
    return [ln for ln in out.splitlines() if ln]


def roles(conv_dir: Path) -> list[str]:
    events = conv_dir / "events"
    if not events.is_dir():
        return []
    names = sorted(n for n in os.listdir(events) if n.endswith(".md"))
    return [n.split("-", 1)[1].removesuffix(".md") for n in names]


def state_of(ws: Path, conv_id: str) -> str:
    from jpfs.core import tree
    from jpfs.core.conversation import Conversation

    return str(tree.state_of(Conversation(ws / "conversations", conv_id)))


def status(ws: Path) -> dict[str, Any]:
    """What `jpfs daemon status --format json` prints (same code, no process start)."""
    from jpfs.services.daemon import process

    return process.status(process.Files(ws / ".jpfs" / "local"))


def leftovers(ws: Path) -> list[str]:
    """Temporary files of jpfs or editors left under the conversation root."""
    out = []
    for top, _dirs, names in os.walk(ws / "conversations"):
        out += [os.path.join(top, n) for n in names if n.endswith((".jpfs-tmp", ".swp", "~"))]
    return out


def fsck(ws: Path) -> str:
    return assert_fsck_clean(ws, "--no-dangling")


# -- the daemon process ------------------------------------------------------------------------


class DaemonProc:
    """``jpfs daemon run`` as a child process we can signal and SIGKILL."""

    def __init__(self, ws: Path) -> None:
        self.ws = ws
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> int:
        log = (self.ws / ".jpfs" / "local" / "test-daemon.out").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jpfs", "daemon", "run"],
            cwd=self.ws, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        log.close()
        pid = self.proc.pid
        wait_until(lambda: self.ready(pid), timeout=20, message="the daemon to be ready")
        return pid

    def ready(self, pid: int) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"daemon exited with {self.proc.returncode}")
        try:
            data = json.loads((self.ws / ".jpfs/local/daemon.json").read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return False
        return bool(data.get("pid") == pid and data.get("ready"))

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self, timeout: float = 30) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@contextlib.contextmanager
def serving(daemon: Daemon) -> Iterator[Daemon]:
    """``daemon`` run on a thread of this process for the block; then stopped, and
    checked stopped."""
    thread = threading.Thread(target=daemon.run)
    thread.start()
    try:
        yield daemon
    finally:
        daemon.stop.set()
        thread.join(20)
    assert not thread.is_alive()


def daemon_proc_fixture(ws: Path) -> Iterator[DaemonProc]:
    """Body of a ``daemon_proc`` fixture: the process is killed whatever the test did."""
    proc = DaemonProc(ws)
    try:
        yield proc
    finally:
        proc.close()


def started_fixture(ws: Path) -> Iterator[Path]:
    """Body of a fixture for tests that use ``jpfs daemon start``: always stopped after."""
    try:
        yield ws
    finally:
        jpfs_subprocess("daemon", "stop", "--force", "--timeout", "20", cwd=ws)
        pid_file = ws / ".jpfs/local/daemon.pid"
        if pid_file.exists():  # stop failed: do not leak a process into the next test
            try:
                os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
