"""Failures kept on this machine because their conversation's own files refused them.

A run's failure is recorded in the conversation: an error event and ``status =
"failed"`` (:func:`jpfs.services.daemon.actions.record_failure`). When those files are
what is wrong (a committed link where ``events/`` should be, ``events`` a plain file, a
full disk), that write fails too, and nothing on disk would say the conversation
failed: it would read ``running`` and be run, and fail, again and again.

So the failure is kept where jpfs can write, ``.jpfs/local/failures/<key>.json``
(machine-local, never committed), with a signature of the conversation's files. While
the signature holds, every view reads the conversation as ``failed`` with that reason
(:func:`of`, :func:`every`), and the daemon leaves it alone. Any change to its
files (the user mends it, new input, a peer's record) ends the kept failure, and the
conversation is looked at from its files again. Where even that file cannot be written
(the disk is full), the failure is kept in this process's memory: its daemon still
stops and says so.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from jpfs.core import ids
from jpfs.core.conversation import ANSWERS, EVENTS, INBOX, QUESTIONS, RESULT, Conversation, now
from jpfs.core.scope import CONVERSATION_TOML, TASK
from jpfs.errors import FormatError, JpfsError
from jpfs.infra import textfile

DIR = "failures"
# What a conversation's state is derived from, and the directory itself (an entry made
# or removed, a link replaced by a directory). lstat: a link is one of its files.
_FILES = ("", CONVERSATION_TOML, TASK, QUESTIONS, ANSWERS, RESULT, EVENTS, INBOX)


@dataclass(frozen=True)
class Failure:
    conversation: str
    message: str  # the run's error, as its error event would have said it
    why: str  # why it could not be written into the conversation
    time: str
    signature: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        del data["signature"]
        return data

    @property
    def shown(self) -> str:
        """One line for listings and status: the error, then why it is kept here."""
        first = self.message.splitlines()[0] if self.message else "failed"
        return f"{first} (not written into the conversation: {self.why})"


_lock = threading.Lock()
# (local dir, conversation id) -> the failure, where not even its file could be written.
_memory: dict[tuple[str, str], Failure] = {}


def signature(conv_path: str) -> tuple[int, ...]:
    out: list[int] = []
    for name in _FILES:
        try:
            st = os.lstat(os.path.join(conv_path, name) if name else conv_path)
        except OSError:
            out.append(-1)
            continue
        out += (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    return tuple(out)


def _path(local_dir: Path, conv_id: str) -> Path:
    return local_dir / DIR / f"{ids.file_key(conv_id)}.json"


def keep(local_dir: Path, conv: Conversation, message: str, why: str) -> Failure:
    """Keep ``message`` as ``conv``'s failure, as its files are now; in memory only
    if the file cannot be written either."""
    failure = Failure(conv.id, message, why, now().isoformat(), signature(os.fspath(conv.path)))
    key = (os.fspath(local_dir), conv.id)
    data = json.dumps({**asdict(failure), "signature": list(failure.signature)}, indent=1)
    try:
        textfile.write_atomic(_path(local_dir, conv.id), data + "\n")
    except OSError:
        with _lock:
            _memory[key] = failure
        return failure
    with _lock:
        _memory.pop(key, None)
    return failure


def clear(local_dir: Path, conv_id: str) -> None:
    """``conv_id``'s failure is in its files now, or is being retried: forget it here."""
    with _lock:
        _memory.pop((os.fspath(local_dir), conv_id), None)
    try:
        _path(local_dir, conv_id).unlink(missing_ok=True)
    except OSError:
        pass


def of(local_dir: Path, conv: Conversation) -> Failure | None:
    """``conv``'s kept failure, if its files are as they were when it was kept."""
    with _lock:
        failure = _memory.get((os.fspath(local_dir), conv.id))
    if failure is None:
        failure = _load(_path(local_dir, conv.id))
    if failure is None or failure.conversation != conv.id:
        return None
    if failure.signature != signature(os.fspath(conv.path)):
        clear(local_dir, conv.id)  # changed since: looked at from its files again
        return None
    return failure


def every(local_dir: Path, conv_root: Path) -> dict[str, Failure]:
    """Every kept failure that still holds, by conversation id."""
    found: list[Failure] = []
    with _lock:
        found += [f for (where, _), f in _memory.items() if where == os.fspath(local_dir)]
    try:
        names = os.listdir(local_dir / DIR)
    except OSError:
        names = []  # none kept (the common case: one failed stat)
    found += [f for n in names if n.endswith(".json") and (f := _load(local_dir / DIR / n))]
    out: dict[str, Failure] = {}
    for failure in found:
        try:
            conv = Conversation(conv_root, failure.conversation)
        except JpfsError:
            continue
        if failure.conversation not in out and of(local_dir, conv) is not None:
            out[failure.conversation] = failure
    return out


def _load(path: Path) -> Failure | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Failure(
            str(data["conversation"]),
            str(data["message"]),
            str(data["why"]),
            str(data["time"]),
            tuple(int(n) for n in data["signature"]),
        )
    except (OSError, ValueError, KeyError, TypeError, FormatError):
        return None  # gone meanwhile, or not ours: a kept failure is only ever a help
