"""Which files of each conversation the watch says were touched, and when each counts as
saved: the reconciler acts on a conversation only once all of them have settled.

Changes arrive after the watcher's ``debounce`` of quiet, so a save that ended (close
after write, rename into place) is settled on arrival; anything else (a write not closed
yet, a file seen only as created because it was written before the watch on its new
directory existed, a deletion) after ``settle``, and then only if no process has it open
for writing: someone typing into ``cat > task.md`` is not done.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from jpfs.services.daemon.procfs import open_files


@dataclass
class FileState:
    last: float  # monotonic time of the last event
    complete: bool  # the last event ended a human's save: act on arrival
    ended: bool = True  # the last event ended a write (close, rename), whoever wrote


class Settling:
    """Touched files by conversation (paths relative to the conversation root)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: dict[str, FileState] = {}
        self.touched: dict[str, set[str]] = {}  # conversation id -> touched paths

    def __contains__(self, conv_id: str) -> bool:
        return conv_id in self.touched

    def note(self, conv_id: str, path: str, state: FileState) -> None:
        self.files[path] = state
        self.touched.setdefault(conv_id, set()).add(path)

    def paths(self, conv_id: str) -> set[str]:
        return self.touched.get(conv_id, set())

    def settled_at(self, paths: set[str], wait: float) -> float:
        """When all of ``paths`` count as saved (monotonic time); ``wait`` is how long
        after its last event a write not seen to end counts as done."""
        return max((self.stable_at(p, wait) for p in paths), default=0.0)

    def stable_at(self, path: str, wait: float) -> float:
        st = self.files.get(path)
        if st is None:
            return 0.0
        if st.complete:
            return st.last
        return st.last + wait

    def still_written(self, paths: set[str]) -> bool:
        """Whether a file whose write was never seen to end is open for writing."""
        unsure = [
            self.root / p for p in paths if (st := self.files.get(p)) is not None and not st.ended
        ]
        return bool(open_files([p for p in unsure if p.is_file()], writing=True))

    def forget(self, conv_id: str) -> None:
        for path in self.touched.pop(conv_id, set()):
            self.files.pop(path, None)
