"""git-style ``*.lock`` files that a crashed jpfs process never leaves blocking.

git never removes a stale ``*.lock``; users do, by hand. We must never remove a lock a
live process holds (git or jpfs), and age proves nothing: ``git commit`` holds
``index.lock`` for as long as the editor is open. So a lock is broken only when it is
provably ours and its creator provably dead:

* Each process keeps one marker file ``<common>/jpfs/locks/proc-<pid>-<rand>`` under an
  exclusive ``flock`` for its lifetime; the kernel drops the flock when the process
  dies, however it dies.
* A lock is built as an unnamed ``O_TMPFILE`` in the lock's directory holding its final
  content (the new ref value, or a random token for ``index.lock``), registered by
  hard-linking the marker as ``<dev>-<ino>-<content digest>``, and only then named
  ``X.lock`` with ``linkat``, which fails if the name exists (git's ``O_EXCL``). So the
  lock appears already registered: no crash leaves an anonymous lock of ours. (Without
  ``O_TMPFILE`` we fall back to ``O_EXCL`` + register, where a crash between the two
  calls leaves an anonymous lock, as a crashed git does; the error names the file.)
* A contender finding ``X.lock`` looks up the registration from the lock's dev, inode
  and content. None: a foreign (git) lock; wait, never break it. If ``flock(LOCK_NB)``
  on it succeeds, the creator is dead: after checking that the registration name still
  points at the inode it locked (a concurrent breaker) and the lock is unchanged, it
  removes the lock, then the registration.
* Holders and breakers remove the lock before its registration. A registration that
  outlives its lock is inert, because the content digest keeps a later git lock that
  reuses the inode from matching it. Sweeps at start-up and during maintenance remove
  such registrations and dead markers (:func:`sweep_owner_file`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import random
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from jpfs.errors import GitError, RepositoryFault
from jpfs.infra.committer.fileio import write_all

log = logging.getLogger(__name__)


def acquire(
    target: Path, owners: Path, timeout: float, *, required: bool, content: bytes = b""
) -> LockFile | None:
    """Take ``<target>.lock`` git-style, breaking it only if provably ours and dead."""
    lock = LockFile(target, owners)
    deadline = time.monotonic() + timeout
    delay = 0.0005
    while True:
        try:
            if lock.try_acquire(content):
                return lock
        except OSError as exc:
            raise RepositoryFault(f"cannot create {lock.path}: {exc.strerror}") from exc
        if lock.break_if_stale():
            continue
        now = time.monotonic()
        if now >= deadline:
            if not required:
                return None
            raise GitError(
                f"{lock.path} exists: another git process seems to be running. If none "
                f"is, remove that file and retry"
            )
        # Polling is git's own strategy for lock files (there is nothing to wait on);
        # jitter keeps contending processes from retrying in lockstep.
        time.sleep(min(delay * (0.5 + random.random()), deadline - now))
        delay = min(delay * 2, 0.02)


class _Marker:
    """This process's flocked marker file; hard links to it name the locks we hold.

    The kernel releases the flock when the process dies, so "the marker's flock is free"
    means "its process is dead". Linking is much cheaper than creating a file.
    """

    _lock: ClassVar[threading.Lock] = threading.Lock()
    _by_dir: ClassVar[dict[Path, _Marker]] = {}

    def __init__(self, directory: Path) -> None:
        self.pid = os.getpid()
        name = f"{self.pid}-{secrets.token_hex(6)}"
        self.path = directory / f"proc-{name}"
        # Flocked before it gets the name sweepers look at, so none can take it for dead.
        fresh = directory / f"new-{name}"
        self.fd = os.open(fresh, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        os.write(self.fd, f"jpfs pid {self.pid}\n".encode())
        os.rename(fresh, self.path)

    @classmethod
    def for_dir(cls, directory: Path, *, renew: bool = False) -> _Marker:
        with cls._lock:
            marker = cls._by_dir.get(directory)
            # After a fork the child shares the parent's flock; it needs its own.
            if renew or marker is None or marker.pid != os.getpid():
                marker = cls._by_dir[directory] = cls(directory)
            return marker


_HAVE_PROC_FD = os.path.isdir("/proc/self/fd")
_LOCK_SAMPLE = 256  # bytes of a lock's content that go into its registration name


def _registration(st: os.stat_result, content: bytes) -> str:
    digest = hashlib.sha1(content[:_LOCK_SAMPLE]).hexdigest()[:24]
    return f"{st.st_dev}-{st.st_ino}-{digest}"


class LockFile:
    """``<target>.lock`` taken git-style (exclusive create), registered as ours.

    The registration is a hard link ``<owners>/<dev>-<ino>-<content digest>`` to this
    process's flocked marker. Where the kernel allows, the lock is built as an unnamed
    ``O_TMPFILE`` holding its final content, registered, and only then given its name
    with ``linkat`` (which fails if the name exists): it appears already registered, so
    no crash leaves an anonymous lock. See the module docstring.
    """

    def __init__(self, target: Path, owners: Path) -> None:
        self.target = target
        self.path = target.with_name(target.name + ".lock")
        self._owners = owners
        self._fd = -1
        self._owner: Path | None = None

    @property
    def fd(self) -> int:
        return self._fd

    def try_acquire(self, content: bytes = b"") -> bool:
        """Create the lock holding ``content`` (a unique token if empty)."""
        data = content or f"jpfs lock {os.getpid()} {secrets.token_hex(8)}\n".encode()
        for attempt in range(2):
            try:
                return self._try_create(data)
            except FileNotFoundError:
                if attempt:
                    raise
                self.path.parent.mkdir(parents=True, exist_ok=True)
        return False  # unreachable

    def _try_create(self, data: bytes) -> bool:
        if not _HAVE_PROC_FD:
            return self._try_create_named(data)
        dfd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            try:
                fd = os.open(".", os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o666, dir_fd=dfd)
            except OSError as exc:
                if exc.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                    return self._try_create_named(data)
                raise
            owner: Path | None = None
            try:
                write_all(fd, data)
                owner = self._register(os.fstat(fd), data)
                try:
                    # A dir fd makes os.link use linkat(AT_SYMLINK_FOLLOW), which names
                    # the unnamed file behind the /proc link.
                    os.link(f"/proc/self/fd/{fd}", self.path.name, dst_dir_fd=dfd)
                except FileExistsError:
                    os.unlink(owner)
                    os.close(fd)
                    return False
            except BaseException:
                if owner is not None:
                    with contextlib.suppress(OSError):
                        os.unlink(owner)
                os.close(fd)
                raise
            self._fd, self._owner = fd, owner
            return True
        finally:
            os.close(dfd)

    def _try_create_named(self, data: bytes) -> bool:
        # Filesystems without O_TMPFILE: a crash between these calls leaves an
        # anonymous lock, exactly like a crashed git.
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o666)
        except FileExistsError:
            return False
        try:
            write_all(fd, data)
            self._owner = self._register(os.fstat(fd), data)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            raise
        self._fd = fd
        return True

    def _register(self, st: os.stat_result, data: bytes) -> Path:
        owner = self._owners / _registration(st, data)
        try:
            os.link(_Marker.for_dir(self._owners).path, owner)
        except FileNotFoundError:
            # Someone removed our marker (by hand?): make a new one.
            os.link(_Marker.for_dir(self._owners, renew=True).path, owner)
        return owner

    def commit(self) -> None:
        """Install the lock's content as the target (git's commit_lock_file)."""
        self._finish(lambda: os.rename(self.path, self.target))

    def release(self) -> None:
        """Drop the lock without installing anything."""
        self._finish(lambda: os.unlink(self.path))

    def _finish(self, action: Callable[[], None]) -> None:
        if self._owner is None:
            return
        # Lock first, registration second: a registration outliving its lock is inert.
        try:
            action()
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            raise
        finally:
            with contextlib.suppress(OSError):
                os.unlink(self._owner)
            os.close(self._fd)
            self._fd, self._owner = -1, None

    def break_if_stale(self) -> bool:
        """Remove the lock if a dead jpfs process left it; True if it is gone now."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return True
        try:
            st = os.fstat(fd)
            sample = os.read(fd, _LOCK_SAMPLE)
        finally:
            os.close(fd)
        owner = self._owners / _registration(st, sample)
        try:
            ofd = os.open(owner, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False  # not ours (git's, say): wait, never break it
        try:
            try:
                fcntl.flock(ofd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # its creator is alive (or another breaker is here)
            try:
                if os.stat(owner).st_ino != os.fstat(ofd).st_ino:
                    return False
                now = os.stat(self.path)
            except FileNotFoundError:
                return False
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                return False
            who = os.pread(ofd, 200, 0).decode(errors="replace").strip()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            os.unlink(owner)
            log.info("removed %s left by a dead process (%s)", self.path, who)
            return True
        finally:
            os.close(ofd)


def sweep_owner_file(owner: Path, live: set[str]) -> None:
    """Remove a dead process's marker, or a registration that outlived its lock.

    ``live`` holds the registration names of lock files that exist: those stay for
    ``break_if_stale`` when someone needs the lock.
    """
    try:
        ofd = os.open(owner, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        try:
            fcntl.flock(ofd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # a live process
        if os.stat(owner).st_ino != os.fstat(ofd).st_ino:
            return
        if owner.name.startswith("new-"):
            # Possibly between creation and flock in a live process: only when old.
            if os.fstat(ofd).st_mtime < time.time() - 3600:
                os.unlink(owner)
        elif owner.name.startswith("proc-") or owner.name not in live:
            os.unlink(owner)  # registrations keep a dead marker's inode for breakers
    except OSError:
        pass
    finally:
        os.close(ofd)


def lock_registrations(gitdir: Path, commondir: Path) -> set[str]:
    """Registration names of the lock files git and jpfs create in a repository."""
    paths: list[str] = []
    tops = {gitdir, commondir}
    with contextlib.suppress(OSError):
        tops.update(Path(e.path) for e in os.scandir(commondir / "worktrees") if e.is_dir())
    for top in tops:
        with contextlib.suppress(OSError):
            paths += [e.path for e in os.scandir(top) if e.name.endswith(".lock")]
    for root, _, files in os.walk(commondir / "refs"):
        paths += [os.path.join(root, f) for f in files if f.endswith(".lock")]
    names: set[str] = set()
    for path in paths:
        with contextlib.suppress(OSError):
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                names.add(_registration(os.fstat(fd), os.read(fd, _LOCK_SAMPLE)))
            finally:
                os.close(fd)
    return names
