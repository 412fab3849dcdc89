"""What the daemon found when it last looked at each conversation, keyed by a stat signature.

A scan skips a conversation whose signature is unchanged and that needed nothing: its
files are the same, so is what they call for. The signature covers every file the
state is derived from (:func:`jpfs.core.tree.snapshot`): ``conversation.toml``, ``task.md``,
``questions.md``, ``answers.md``, ``result.md``, the ``events/`` and ``inbox/``
directories (entries added or removed) and the last event file (edited in place).
For each, inode, size, mtime and ctime: the kernel sets ctime on every change and
nobody can set it back, so an edit cannot keep a signature.

The memory is saved to ``.jpfs/local/daemon-seen.json`` after each scan and at stop,
so a restart reads only the conversations that changed while the daemon was down.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from jpfs.core.conversation import ANSWERS, EVENT_RE, EVENTS, INBOX, QUESTIONS, RESULT, Conversation
from jpfs.core.scope import CONVERSATION_TOML, TASK
from jpfs.infra import textfile
from jpfs.services.daemon.actions import Need

log = logging.getLogger("jpfs.services.daemon")

FILE = "daemon-seen.json"
VERSION = 1
_FILES = (CONVERSATION_TOML, TASK, QUESTIONS, ANSWERS, RESULT, EVENTS, INBOX)


def _stat(path: str) -> tuple[int, ...]:
    try:
        st = os.stat(path)
    except OSError:
        return (-1,)
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def signature(conv: Conversation) -> int:
    """A fingerprint of the files the state depends on (stats and one listdir, no reads)."""
    return signature_at(os.fspath(conv.path))


def signature_at(base: str) -> int:
    """:func:`signature` of the conversation directory ``base`` (a scan has its path and
    needs no :class:`Conversation` for the conversations it skips)."""
    join = os.path.join
    parts: list[int] = []
    for name in _FILES:
        parts += _stat(join(base, name))
    last = ""
    try:
        names = [n for n in os.listdir(os.path.join(base, EVENTS)) if EVENT_RE.match(n)]
        last = max(names, default="")
    except OSError:
        pass
    if last:
        parts.append(int(last.split("-", 1)[0]))
        parts += _stat(os.path.join(base, EVENTS, last))
    # Only ints: their hash is the same in every process (no PYTHONHASHSEED), so a saved
    # signature compares with a fresh one.
    return hash(tuple(parts))


class Seen:
    def __init__(self) -> None:
        self.entries: dict[str, tuple[int, Need]] = {}
        self.dirty = False

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, conv_id: str) -> tuple[int, Need] | None:
        return self.entries.get(conv_id)

    def put(self, conv_id: str, sig: int, need: Need) -> None:
        if self.entries.get(conv_id) != (sig, need):
            self.entries[conv_id] = (sig, need)
            self.dirty = True

    def keep_only(self, live: set[str]) -> None:
        for gone in set(self.entries) - live:
            del self.entries[gone]
            self.dirty = True

    def unchanged(self, conv_id: str, path: str) -> bool:
        """Seen before, needed nothing, and its files (in directory ``path``) are the
        same: skip it."""
        last = self.entries.get(conv_id)
        return last is not None and last[1] is Need.NOTHING and last[0] == signature_at(path)

    def load(self, local: Path) -> bool:
        try:
            data = json.loads((local / FILE).read_text(encoding="utf-8"))
            if data.get("version") != VERSION:
                return False
            self.entries = {
                str(k): (int(v[0]), Need(v[1])) for k, v in dict(data["entries"]).items()
            }
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return False
        return True

    def save(self, local: Path) -> None:
        if not self.dirty:
            return
        path = local / FILE
        data = {
            "version": VERSION,
            "entries": {k: [s, n.value] for k, (s, n) in self.entries.items()},
        }
        try:
            textfile.write_atomic(path, json.dumps(data, separators=(",", ":")))
            self.dirty = False
        except OSError as exc:
            log.warning("cannot save %s: %s", path, exc)
