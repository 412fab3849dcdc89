"""Reading and writing text files: the one reader for everything jpfs takes from the
record, and the writes of everything it keeps (record and machine state), atomic
through :mod:`jpfs.infra.atomic`.

A conversation's files come from editors, agents and clones of other people's
repositories, so a read must not trust them:

* **No links.** The file is opened with ``O_NOFOLLOW``, and the path the kernel
  opened (``/proc/self/fd``) must lie under the real path of the root: a symbolic
  link as the file or as any directory on the way is refused, and its target is
  never read, so never sent to a provider nor committed as content. Checking the
  opened descriptor, not the path beforehand, leaves no window for a swap.
* **Regular files only.** A FIFO, socket, device or directory where a file belongs
  is refused; the open is non-blocking, so a FIFO cannot hang the reader.
* **A size cap** (:data:`MAX_BYTES`): a larger file is an error naming its size, never
  silently cut.
* **Text.** UTF-8; a byte-order mark is dropped and CRLF read as LF. Invalid UTF-8 is
  an error naming the file and the byte offset.

Every refusal is a :class:`~jpfs.errors.FormatError` naming the path: listings show
that conversation as broken, the daemon records an error event in it, and every other
conversation carries on. A missing file raises :class:`FileNotFoundError` as usual.

Writes (:func:`write_atomic`, :func:`write_temporary`) go to a temporary file
``.NAME.THREAD.PID.jpfs-tmp`` beside the target, then are renamed over it: a reader
sees the old content or the new, never half. A write that fails (a full disk) leaves
nothing behind; one whose process died is swept by the daemon's start (the pid is
last in the name, so a dead writer can be told from a live one). Given the root, a
write refuses a directory that leads outside it: :func:`create_new` (event files)
checks where its unnamed file really is, so no swap can move it; :func:`write_atomic`
resolves the directory first, which refuses any link already there.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
import threading
from pathlib import Path

from jpfs.errors import FormatError
from jpfs.infra import atomic

MAX_BYTES = 8 * 1024 * 1024
_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_PROC_FD = Path("/proc/self/fd")
_HAVE_PROC_FD = os.path.isdir(_PROC_FD)
_BOM = b"\xef\xbb\xbf"


def read_bytes(path: Path, root: Path | None = None, *, limit: int = MAX_BYTES) -> bytes:
    """The content of regular file ``path``, refusing links (under ``root``, if given)."""
    try:
        fd = os.open(path, _FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            raise FormatError(f"{path} is a symbolic link; jpfs does not follow links") from exc
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise FormatError(f"{path} is {kind}; a conversation file must be a regular file")
        if root is not None:
            _require_within(fd, path, root)
        if st.st_size > limit:
            raise FormatError(
                f"{path} is {st.st_size} bytes, over the {limit} bytes jpfs reads from a"
                " conversation file; shorten it or move the content into files/"
            )
        data = read_upto(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:  # grew while we read
        raise FormatError(f"{path} is over the {limit} bytes jpfs reads from a conversation file")
    return data


def read_text(path: Path, root: Path | None = None, *, limit: int = MAX_BYTES) -> str:
    """``path`` as text (see the module docstring)."""
    return decode(read_bytes(path, root, limit=limit), path)


def decode(data: bytes, path: Path | str) -> str:
    if data.startswith(_BOM):
        data = data[len(_BOM) :]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(
            f"{path} is not valid UTF-8 (byte {exc.start}: {data[exc.start : exc.start + 1]!r});"
            " save it as UTF-8"
        ) from exc
    return text.replace("\r\n", "\n") if "\r\n" in text else text


def _require_within(fd: int, path: Path, root: Path) -> None:
    try:
        opened = os.readlink(_PROC_FD / str(fd))
    except OSError:
        # No /proc: fall back to the path (racy, but refuses what is already there).
        opened = os.path.realpath(path)
    if not _within(opened, root):
        raise _refuse_outside(path, root)


@functools.lru_cache(maxsize=64)
def _real(root: str) -> str:
    """``root`` with its links resolved, once per process (a conversation root)."""
    return os.path.realpath(root)


def _within(real: str, root: Path) -> bool:
    top = _real(os.fspath(root))
    return real == top or real.startswith(top.rstrip("/") + "/")


def _refuse_outside(path: Path, root: Path) -> FormatError:
    return FormatError(
        f"{path} leads outside {root} through a symbolic link; jpfs does not follow links:"
        " make it a real file or directory there"
    )


def check_within(directory: Path, root: Path | None) -> None:
    """:class:`FormatError` unless ``directory`` is under ``root`` once links are resolved
    (a conversation or its ``events/`` made a link to elsewhere): before writing or
    making anything in it. No check without a root."""
    if root is not None and not _within(os.path.realpath(directory), root):
        raise _refuse_outside(directory, root)


def read_upto(fd: int, limit: int) -> bytes:
    """At most ``limit`` bytes from ``fd`` (fewer at the end of the file)."""
    chunks: list[bytes] = []
    got = 0
    while got < limit:
        chunk = os.read(fd, min(limit - got, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def temporary_path(path: Path, tmp_dir: Path | None = None) -> Path:
    """Where a write of ``path`` is prepared: beside it (the rename is atomic), or in
    ``tmp_dir`` (on the same file system) where a directory's readers must not see it."""
    name = f".{path.name}.{threading.get_ident()}.{os.getpid()}.jpfs-tmp"
    return (tmp_dir or path.parent) / name


def write_temporary(tmp: Path, text: str | bytes) -> None:
    """Write ``tmp`` whole, or leave nothing behind (a full disk fails mid-write)."""
    try:
        tmp.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(
    path: Path,
    text: str | bytes,
    *,
    tmp_dir: Path | None = None,
    parents: bool = True,
    root: Path | None = None,
) -> None:
    """Replace ``path`` with ``text`` all at once (a temporary file, then a rename).
    Without ``parents``, a missing directory is :class:`FileNotFoundError`, not made;
    with ``root``, a directory that links outside it is :class:`FormatError`."""
    if parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    check_within(path.parent, root)
    # The name is this thread's alone: one left by a dead process of the same pid is
    # overwritten, not an error.
    data = text.encode("utf-8") if isinstance(text, str) else text
    atomic.replace(path, data, temporary_path(path, tmp_dir), exclusive=False)


def names_no_directory(exc: OSError) -> bool:
    """Whether ``exc`` says its path names no directory: missing, a file on the way, or a
    loop of links (ELOOP, which Python gives no class of its own)."""
    return isinstance(exc, FileNotFoundError | NotADirectoryError) or exc.errno == errno.ELOOP


def create_new(
    path: Path,
    text: str,
    *,
    tmp_dir: Path | None = None,
    parents: bool = True,
    root: Path | None = None,
) -> bool:
    """Create ``path`` with ``text``, all or nothing, unless it exists (False then): a
    hard link of a complete temporary file never shows a half-written one.

    Where the kernel allows, the temporary file is unnamed (``O_TMPFILE``) and linked
    into place once whole: one directory entry instead of three (create, link, unlink),
    about half the cost of an event append, and nothing left behind by a crash.
    Without ``parents``, a missing directory is :class:`FileNotFoundError`, not made;
    with ``root``, a directory that links outside it is :class:`FormatError`, and one
    that is a loop of links :class:`NotADirectoryError` (it names no directory)."""
    try:
        return _create(path, text, tmp_dir, parents, root)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise NotADirectoryError(errno.ENOTDIR, "a loop of links", str(path.parent)) from exc


def _create(path: Path, text: str, tmp_dir: Path | None, parents: bool, root: Path | None) -> bool:
    if tmp_dir is None and _HAVE_PROC_FD:
        created = _create_unnamed(path, text.encode("utf-8"), parents, root)
        if created is not None:
            return created
    if parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    check_within(path.parent, root)
    tmp = temporary_path(path, tmp_dir)
    write_temporary(tmp, text)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    return True


def _create_unnamed(path: Path, data: bytes, parents: bool, root: Path | None) -> bool | None:
    """:func:`create_new` through an unnamed file; None where ``O_TMPFILE`` is refused.

    Four system calls (open, write, link, close), by absolute paths: under a busy group
    commit every call is a point where 50 writer threads hand the interpreter lock
    around, so an extra open and close of the directory cost more than themselves."""
    target = os.path.abspath(path)
    directory = os.path.dirname(target)
    try:
        try:
            fd = os.open(directory, os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o666)
        except FileNotFoundError:
            if not parents:
                raise
            os.makedirs(directory, exist_ok=True)
            fd = os.open(directory, os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
            return None
        raise
    try:
        if root is not None:
            # Where the unnamed file really is ("<dir>/#<inode> (deleted)"): one call,
            # and no link swapped in after a check can move it.
            where = os.path.dirname(os.readlink(f"{_PROC_FD}/{fd}"))
            if not _within(where, root):
                raise _refuse_outside(path, root)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        try:
            # A dir fd makes os.link call linkat(AT_SYMLINK_FOLLOW), which names the
            # unnamed file behind the /proc link (link() would link the link itself)
            # and fails if the name exists; both paths are absolute, so linkat never
            # looks at that fd.
            os.link(f"/proc/self/fd/{fd}", target, src_dir_fd=fd)
        except FileExistsError:
            return False
    finally:
        os.close(fd)
    return True


def encodable(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8: JSON's ``\\ud800`` decodes to a lone
    surrogate, which no file can hold (a reply kept byte for byte must be refused)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
