"""The daemon as a process: one per workspace, its files, detaching, signals.

.jpfs/local/daemon.lock    flock held by the running daemon for its whole life; the
                           kernel drops it however the process dies, so a stale pid
                           file never blocks a start
.jpfs/local/daemon.pid     the pid (informational; the lock is the truth)
.jpfs/local/daemon.json    status, rewritten about once a second while running
.jpfs/local/daemon.log     the log (rotated)
.jpfs/local/daemon.out     stdout/stderr of a detached daemon (crashes before logging)
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import fcntl
import gc
import json
import logging
import logging.handlers
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from jpfs.core import locks
from jpfs.core.workspace import Workspace
from jpfs.errors import DaemonError
from jpfs.infra import textfile

LOCK = "daemon.lock"
PID = "daemon.pid"
STATUS = "daemon.json"
LOG = "daemon.log"
OUT = "daemon.out"


@dataclass
class Stats:
    """The counters of a running daemon that its status file shows."""

    started: float = field(default_factory=time.time)
    runs: int = 0
    failures: int = 0


@dataclass(frozen=True)
class Files:
    local: Path

    @classmethod
    def of(cls, ws: Workspace) -> Files:
        return cls(ws.local_dir)

    @property
    def lock(self) -> Path:
        return self.local / LOCK

    @property
    def pid(self) -> Path:
        return self.local / PID

    @property
    def status(self) -> Path:
        return self.local / STATUS

    @property
    def log(self) -> Path:
        return self.local / LOG

    @property
    def out(self) -> Path:
        return self.local / OUT


# -- the single-instance lock ----------------------------------------------------------


@contextlib.contextmanager
def instance_lock(files: Files) -> Iterator[None]:
    """Hold the workspace's daemon lock, or raise :class:`DaemonError` if another has it."""
    files.local.mkdir(parents=True, exist_ok=True)
    fd = os.open(files.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = read_pid(files)
            raise DaemonError(
                f"a daemon is already running for this workspace (pid {pid or '?'});"
                " see `jpfs daemon status`, or stop it with `jpfs daemon stop`"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        files.pid.write_text(f"{os.getpid()}\n", encoding="utf-8")
        try:
            yield
        finally:
            for path in (files.pid, files.status):
                path.unlink(missing_ok=True)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def is_running(files: Files) -> bool:
    return locks.is_held(files.lock)


def read_pid(files: Files) -> int | None:
    for path in (files.lock, files.pid):
        try:
            text = path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            continue
        if text.isdigit():
            return int(text)
    return None


def running_pid(files: Files) -> int | None:
    """The daemon's pid if one is running (a leftover pid file counts for nothing)."""
    return read_pid(files) if is_running(files) else None


# -- status ------------------------------------------------------------------------------


def write_status(files: Files, data: dict[str, Any]) -> None:
    textfile.write_atomic(files.status, json.dumps(data, indent=1, default=str) + "\n")


def read_status(files: Files) -> dict[str, Any]:
    try:
        data = json.loads(files.status.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def status(files: Files) -> dict[str, Any]:
    """What ``jpfs daemon status`` shows."""
    pid = running_pid(files)
    if pid is None:
        return {"running": False, "pid": None}
    data = read_status(files)
    if data.get("pid") != pid:
        # Starting up (status not written yet) or a leftover from a killed daemon.
        data = {"pid": pid, "ready": False}
    started = data.get("started")
    uptime = None
    if isinstance(started, (int, float)):
        uptime = round(time.time() - started, 1)
    return {**data, "running": True, "pid": pid, "uptime": uptime}


def iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).replace(microsecond=0).isoformat()


# -- start / stop from the CLI -------------------------------------------------------------


def spawn(ws: Workspace, cfg: Sequence[str], *, timeout: float = 30.0) -> int:
    """Start ``jpfs daemon run`` detached and return its pid once it reports ready."""
    files = Files.of(ws)
    pid = running_pid(files)
    if pid is not None:
        raise DaemonError(
            f"a daemon is already running for this workspace (pid {pid});"
            " stop it first with `jpfs daemon stop`"
        )
    ws.ensure_local()
    argv = [sys.executable, "-m", "jpfs", "-w", str(ws.root)]
    for item in cfg:
        argv += ["--cfg", item]
    argv += ["daemon", "run", "--detached"]
    with open(files.out, "ab") as out, open(os.devnull, "rb") as devnull:
        proc = subprocess.Popen(
            argv, cwd=ws.root, stdin=devnull, stdout=out, stderr=out, start_new_session=True,
            close_fds=True,
        )  # fmt: skip
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            raise DaemonError(f"the daemon exited during start-up ({_reason(files, code)})")
        data = read_status(files)
        if data.get("pid") == proc.pid and data.get("ready"):
            return proc.pid
        pause.wait(0.02)
    raise DaemonError(
        f"the daemon (pid {proc.pid}) did not report ready within {timeout:.0f}s; see {files.log}"
    )


def _reason(files: Files, code: int) -> str:
    for path in (files.out, files.log):
        try:
            lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
        except FileNotFoundError:
            continue
        if lines:
            return lines[-1].strip()
    return f"exit status {code}"


def stop(files: Files, *, timeout: float = 60.0, force: bool = False) -> int | None:
    """Ask the daemon to stop and wait until it is gone; returns its pid (None: none ran).

    Takes the daemon's files, not a loaded workspace: stopping must work whatever the
    configuration says (a broken config.toml is the usual reason to restart)."""
    pid = running_pid(files)
    if pid is None:
        return None
    _signal(pid, signal.SIGTERM)
    if force:
        # A second signal interrupts the steps in flight. A different signal, because two
        # pending SIGTERMs would merge into one.
        _signal(pid, signal.SIGINT)
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    # Its lock first (the agents' steps end before it), then the process itself: a script
    # that stops a daemon and goes on must not find it still exiting.
    while is_running(files) or running(pid):
        if time.monotonic() > deadline:
            raise DaemonError(
                f"the daemon (pid {pid}) is still finishing its agents' current steps after"
                f" {timeout:.0f}s; run `jpfs daemon stop --force` to interrupt them"
            )
        pause.wait(0.02)
    return pid


def running(pid: int) -> bool:
    """Whether process ``pid`` still runs. A zombie (dead, its reaper not done yet, which
    in a container may be never) does not; without /proc, whether the kernel knows it."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            return False  # gone
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


# -- signals inside the daemon ----------------------------------------------------------------


class Signals:
    """SIGTERM/SIGINT: the first stops gracefully, the second forces; SIGHUP rescans.

    The handlers only queue the signal (``SimpleQueue.put`` is reentrant); a thread of
    its own acts on it. A handler that set an Event itself took the Event's lock: the
    second signal of `jpfs daemon stop --force`, arriving while the first handler was
    inside ``Event.set``, waited for a lock its own thread held, for ever."""

    def __init__(self, stop: threading.Event, force: threading.Event, rescan: Any) -> None:
        self.stop = stop
        self.force = force
        self.rescan = rescan
        self._old: dict[int, Any] = {}
        self._queue: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._relay: threading.Thread | None = None

    def install(self) -> None:
        self._relay = threading.Thread(target=self._act, name="jpfs-signals", daemon=True)
        self._relay.start()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            self._old[sig] = signal.signal(sig, self._note)

    def restore(self) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        if self._relay is not None:
            self._queue.put(None)
            self._relay.join()

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self._queue.put(signum)

    def _act(self) -> None:
        while (signum := self._queue.get()) is not None:
            if signum == signal.SIGHUP:
                self.rescan()
                continue
            if self.stop.is_set():
                self.force.set()
            self.stop.set()


_M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)
MALLOC_ARENAS = 2


def settle_heap() -> int:
    """Move every object alive now out of the cyclic garbage collector's sight
    (``gc.freeze``); how many. Done once the daemon has loaded the SDKs: with jpfs's,
    the modules are some 170,000 objects that live as long as the process, and each
    full collection walked them all with every thread stopped: 30-160 ms, three or four
    times in a run of 36 turns, wherever a turn was. Collections now walk only what came
    after. The cost: cyclic garbage among the objects alive now is never collected
    (acyclic objects are still freed when their last reference goes); in-process daemons
    (tests) do not settle the heap of the process they share."""
    gc.freeze()
    return gc.get_freeze_count()


def limit_malloc_arenas() -> bool:
    """Have glibc's malloc use :data:`MALLOC_ARENAS` arenas, as ``MALLOC_ARENA_MAX=2``
    would; whether it was done. glibc gives threads arenas of their own (up to eight per
    core), and memory freed in one is not reused by a thread of another: with runs,
    commits and queries on threads that come and go, a daemon at 10,000 conversations
    held 147 MB after 200 tasks, 137 MB with two arenas. Not done where the variable is
    set (the user's choice) or off glibc; threads started earlier keep their arena."""
    if "MALLOC_ARENA_MAX" in os.environ or not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_ARENA_MAX, MALLOC_ARENAS))


def setup_logging(ws: Workspace, *, stderr: bool) -> logging.Handler:
    """The daemon's log: ``daemon.log``, rotated; also stderr for ``daemon run``."""
    files = Files.of(ws)
    ws.ensure_local()
    handler = logging.handlers.RotatingFileHandler(
        files.log,
        maxBytes=ws.config.daemon.log_max_bytes,
        backupCount=ws.config.daemon.log_backups,
        encoding="utf-8",
    )
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    handler.setFormatter(fmt)
    root = logging.getLogger("jpfs")
    root.setLevel(logging.INFO)
    root.addHandler(handler)
    if stderr:
        console = logging.StreamHandler(sys.stderr)
        console.setFormatter(fmt)
        root.addHandler(console)
    return handler
