"""Confined file access: model-supplied relative paths that can never leave a root.

Every path is walked one component at a time with ``os.open(..., dir_fd=...)`` and
``O_NOFOLLOW``: a symlink anywhere on the path, including one swapped in while we walk,
makes the open fail instead of escaping. Checking a path first and opening it afterwards
is racy (a thread swapping a directory for a symlink put 1,217 of 3,000 checked opens
outside the root), so nothing here resolves a path and then trusts the answer.

``.git`` (any case, plus the spellings case-folding and HFS+/NTFS filesystems treat as
equal) and the ``.jpfs/local`` subtree are refused everywhere and skipped by walks.
Only POSIX is supported (``dir_fd`` / ``O_NOFOLLOW`` / ``O_DIRECTORY``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Sequence
from pathlib import Path

from jpfs.errors import JpfsError, NotFoundError, ScopeError, ToolError
from jpfs.infra.textfile import read_upto

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK so that opening a FIFO planted in the tree cannot hang the caller.
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
# Bounds that keep a walk over a huge tree from running away.
_SCAN_CAP = 100_000
_MAX_DEPTH = 64
_GREP_FILE_CAP = 8_000_000
_MODIFY_CAP = 8_000_000
_GREP_LINE_CHARS = 500

# Code points HFS+ ignores in names (git's is_hfs_dotgit list): ".g\u200cit" is ".git" there.
_HFS_IGNORABLE: dict[int, None] = dict.fromkeys(
    [0x200C, 0x200D, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x206A, 0x2070), 0xFEFF]
)


def _fold(name: str) -> str:
    # Compare names the way the most lenient filesystem we may sit on would: case-insensitive
    # (macOS, Windows), HFS+ invisible code points dropped, NTFS trailing dots/spaces dropped.
    return name.translate(_HFS_IGNORABLE).rstrip(" .").casefold()


def _is_dotgit(name: str) -> bool:
    folded = _fold(name)
    return folded in (".git", "git~1")


def _is_local_state(parent: str | None, name: str) -> bool:
    return parent is not None and _fold(parent) == ".jpfs" and _fold(name) == "local"


def _show(relpath: str) -> str:
    return repr(relpath if len(relpath) <= 200 else relpath[:200] + "...")


def split_relpath(relpath: str) -> tuple[str, ...]:
    """Validate a model-supplied relative path and return its components ("." -> ())."""
    if not isinstance(relpath, str):
        raise ScopeError("path must be a string")
    shown = _show(relpath)
    if relpath == "":
        raise ScopeError("empty path; give a path relative to the working tree")
    if "\0" in relpath:
        raise ScopeError(f"path {shown} contains a NUL byte")
    if relpath.startswith("/"):
        raise ScopeError(f"path {shown} is absolute; give a path relative to the working tree")
    parts = tuple(p for p in relpath.split("/") if p not in ("", "."))
    if ".." in parts:
        raise ScopeError(f"path {shown} contains '..'; paths may not leave the working tree")
    parent: str | None = None
    for name in parts:
        if _is_dotgit(name):
            raise ScopeError(f"path {shown} is inside a .git directory; agents may not access it")
        if _is_local_state(parent, name):
            raise ScopeError(f"path {shown} is inside .jpfs/local; agents may not access it")
        parent = name
    return parts


def normalize_relpath(relpath: str) -> str:
    """The validated POSIX form of ``relpath`` ("a//./b" -> "a/b", "./" -> ".")."""
    return "/".join(split_relpath(relpath)) or "."


def _translate(exc: OSError, dfd: int, name: str, sofar: Sequence[str], shown: str) -> JpfsError:
    where = "/".join(sofar)
    with contextlib.suppress(OSError):
        if stat.S_ISLNK(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode):
            return ScopeError(f"path {shown}: {where!r} is a symbolic link; links are not followed")
    if isinstance(exc, FileNotFoundError):
        return NotFoundError(f"path {shown}: {where!r} does not exist")
    if isinstance(exc, NotADirectoryError):
        return ToolError(f"path {shown}: {where!r} is not a directory")
    if isinstance(exc, IsADirectoryError):
        return ToolError(f"path {shown} is a directory, not a file")
    if isinstance(exc, PermissionError):
        return ToolError(f"path {shown}: permission denied")
    if exc.errno == getattr(os, "ELOOP", 40):
        # The link was swapped away again before we could look at it.
        return ScopeError(f"path {shown}: {where!r} is a symbolic link; links are not followed")
    return ToolError(f"path {shown}: {exc.strerror or exc}")


def _open_root(root: Path) -> int:
    try:
        return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise NotFoundError(f"working tree {str(root)!r}: {exc.strerror}") from exc


def _step(dfd: int, name: str, flags: int, mode: int, sofar: Sequence[str], shown: str) -> int:
    try:
        return os.open(name, flags, mode, dir_fd=dfd)
    except OSError as exc:
        raise _translate(exc, dfd, name, sofar, shown) from exc


def _open_dir(root: Path, parts: Sequence[str], shown: str, create: bool = False) -> int:
    """An fd on the directory ``root/parts``, walked without following any link."""
    dfd = _open_root(root)
    try:
        for i, name in enumerate(parts):
            try:
                nfd = os.open(name, _DIR_FLAGS, dir_fd=dfd)
            except FileNotFoundError:
                if not create:
                    where = "/".join(parts[: i + 1])
                    raise NotFoundError(f"path {shown}: {where!r} does not exist") from None
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o777, dir_fd=dfd)
                nfd = _step(dfd, name, _DIR_FLAGS, 0, parts[: i + 1], shown)
            except OSError as exc:
                raise _translate(exc, dfd, name, parts[: i + 1], shown) from exc
            os.close(dfd)
            dfd = nfd
        return dfd
    except BaseException:
        os.close(dfd)
        raise


def open_beneath(root: Path, relpath: str, flags: int, mode: int = 0o644) -> int:
    """Open ``root/relpath`` refusing any symlink on the way; returns an fd the caller closes."""
    parts = split_relpath(relpath)
    shown = _show(relpath)
    if not parts:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC):
            raise ScopeError(f"path {shown} names the working tree itself, not a file")
        return _open_root(root)
    dfd = _open_dir(root, parts[:-1], shown)
    try:
        return _step(dfd, parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, parts, shown)
    finally:
        os.close(dfd)


def resolve_within(root: Path, relpath: str) -> Path:
    """``root/relpath`` for display only: refuses bad paths and existing links, but is racy."""
    path = Path(root)
    for name in split_relpath(relpath):
        path = path / name
        if path.is_symlink():
            raise ScopeError(f"path {_show(relpath)} goes through a symbolic link")
    return path


def _require_regular(fd: int, shown: str) -> os.stat_result:
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        raise ToolError(f"path {shown} is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise ToolError(f"path {shown} is not a regular file")
    return st


def _decode(data: bytes, truncated: bool, shown: str) -> str:
    if b"\0" in data:
        raise ToolError(f"path {shown} is a binary file; only UTF-8 text files can be read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if truncated and exc.start >= len(data) - 3:
            # The byte cap cut a multi-byte character in half.
            return data[: exc.start].decode("utf-8")
        raise ToolError(f"path {shown} is not UTF-8 text (binary or another encoding)") from exc


def read_text(root: Path, relpath: str, max_bytes: int = 256_000) -> tuple[str, bool]:
    """The file's text (UTF-8) up to ``max_bytes``, and whether it was cut there."""
    fd = open_beneath(root, relpath, _READ_FLAGS)
    try:
        _require_regular(fd, _show(relpath))
        data = read_upto(fd, max_bytes + 1)
    finally:
        os.close(fd)
    truncated = len(data) > max_bytes
    return _decode(data[:max_bytes], truncated, _show(relpath)), truncated


def _replace_file(dfd: int, name: str, data: bytes, shown: str) -> bool:
    """Atomically replace ``name`` in ``dfd``; True when the file is new."""
    try:
        st: os.stat_result | None = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise ScopeError(f"path {shown} is a symbolic link; refusing to write through it")
        if stat.S_ISDIR(st.st_mode):
            raise ToolError(f"path {shown} is a directory, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(f"path {shown} is not a regular file")
    tmp = f".jpfs-tmp-{secrets.token_hex(8)}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666, dir_fd=dfd)
        try:
            if st is not None:
                os.fchmod(fd, stat.S_IMODE(st.st_mode) & 0o777)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        # rename() replaces whatever sits at `name` (even a link swapped in since the
        # check above) and never writes through it.
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dfd)
        raise ToolError(f"cannot write {shown}: {exc.strerror or exc}") from exc
    return st is None


def _encode(text: str, shown: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError(f"content for {shown} is not valid Unicode text") from exc


def write_text(root: Path, relpath: str, text: str, create_dirs: bool = True) -> bool:
    """Write ``text`` (UTF-8) to ``root/relpath`` atomically; True when the file is new."""
    parts = split_relpath(relpath)
    shown = _show(relpath)
    if not parts:
        raise ScopeError(f"path {shown} names the working tree itself, not a file")
    data = _encode(text, shown)
    dfd = _open_dir(root, parts[:-1], shown, create=create_dirs)
    try:
        return _replace_file(dfd, parts[-1], data, shown)
    finally:
        os.close(dfd)


def modify_text(root: Path, relpath: str, old: str, new: str, count: int | None = 1) -> int:
    """Replace exact occurrences of ``old``; count=1 demands exactly one, None replaces all."""
    if old == "":
        raise ToolError("the text to replace must not be empty")
    if count is not None and count < 1:
        raise ToolError("count must be at least 1")
    parts = split_relpath(relpath)
    shown = _show(relpath)
    if not parts:
        raise ScopeError(f"path {shown} names the working tree itself, not a file")
    dfd = _open_dir(root, parts[:-1], shown)
    try:
        fd = _step(dfd, parts[-1], _READ_FLAGS, 0, parts, shown)
        try:
            _require_regular(fd, shown)
            data = read_upto(fd, _MODIFY_CAP + 1)
        finally:
            os.close(fd)
        if len(data) > _MODIFY_CAP:
            raise ToolError(f"path {shown} is larger than {_MODIFY_CAP:,} bytes; cannot modify")
        text = _decode(data, False, shown)
        found = text.count(old)
        if found == 0:
            raise ToolError(
                f"the text to replace was not found in {shown}; it must match exactly, "
                "including whitespace and indentation"
            )
        if count == 1 and found > 1:
            raise ToolError(
                f"the text to replace occurs {found} times in {shown}; include more "
                "surrounding text so it matches exactly once"
            )
        done = found if count is None else min(found, count)
        _replace_file(dfd, parts[-1], _encode(text.replace(old, new, done), shown), shown)
        return done
    finally:
        os.close(dfd)
