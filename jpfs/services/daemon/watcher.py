"""File events under the conversation root: a watchdog (inotify) observer, filters, debounce.

:func:`watch` is a generator in the style of ``watchfiles.watch``: it yields batches of
:class:`Change` once a burst of events has been quiet for ``debounce`` seconds, and
returns (stopping and joining the observer's threads) once ``stop`` is set.

Only the conversation root is watched: watching the repository root would add hundreds
of watches and events under ``.git/``. Events are hints, never the truth: the consumer
re-reads the files. Things this module cannot promise, measured with watchdog 7.1:

* a file written right after ``mkdir -p`` may arrive only as ``created`` (the watch on
  the new directory was added after the write), or twice; so ``closed`` is a hint that
  a save is complete, not something to wait for;
* an inotify queue overflow drops events silently except for a log warning from
  watchdog; :class:`OverflowProbe` turns that warning into ``Batch.overflow`` and the
  consumer must rescan everything.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from watchdog import events as wd_events
from watchdog.observers import Observer

log = logging.getLogger("jpfs.services.daemon.watcher")

# The kinds of Change; "closed" and "moved_to" mean a writer finished a whole save.
CREATED, MODIFIED, CLOSED, DELETED, MOVED_FROM, MOVED_TO = (
    "created", "modified", "closed", "deleted", "moved_from", "moved_to",
)  # fmt: skip
_EVENT_TYPES: list[type[wd_events.FileSystemEvent]] = [
    wd_events.FileCreatedEvent,
    wd_events.FileModifiedEvent,
    wd_events.FileClosedEvent,
    wd_events.FileDeletedEvent,
    wd_events.FileMovedEvent,
    wd_events.DirCreatedEvent,
    wd_events.DirDeletedEvent,
    wd_events.DirMovedEvent,
]
_KINDS = {
    wd_events.EVENT_TYPE_CREATED: CREATED,
    wd_events.EVENT_TYPE_MODIFIED: MODIFIED,
    wd_events.EVENT_TYPE_CLOSED: CLOSED,
    wd_events.EVENT_TYPE_DELETED: DELETED,
}
_INOTIFY_LOGGER = "watchdog.observers.inotify_c"


@dataclass(frozen=True)
class Change:
    """One event: ``path`` is relative to the watched root, with ``/`` separators."""

    path: str
    kind: str
    is_dir: bool = False


@dataclass
class Batch:
    changes: list[Change] = field(default_factory=list)
    # Events were lost (inotify queue overflow): rescan everything.
    overflow: bool = False

    def __bool__(self) -> bool:
        return bool(self.changes) or self.overflow


# -- filters ---------------------------------------------------------------------------


class Filter(Protocol):
    def ignores(self, rel: str) -> bool:
        """True when a change to ``rel`` (relative to the root) must not wake anyone."""
        ...


class IgnoredDirs:
    """Anything under ``.git/`` or ``.jpfs/`` (e.g. a root configured as ``.``)."""

    def __init__(self, names: Sequence[str] = (".git", ".jpfs")) -> None:
        self.names = frozenset(names)

    def ignores(self, rel: str) -> bool:
        return any(part in self.names for part in rel.split("/"))


# Editors' temporary, swap, backup and lock files, and jpfs's own temporary files.
EDITOR_PATTERNS = (
    "*.swp", "*.swo", "*.swx", ".*.sw?", "4913", "*~", ".#*", "#*#",  # vim, emacs
    "*.tmp", "*.temp", ".goutputstream-*", "*___jb_tmp___", "*___jb_old___",  # gedit, JetBrains
    ".*.kate-swp", ".~lock.*#", "*.bak", ".DS_Store", "*.crswap",  # kate, LibreOffice, macOS
    "*.jpfs-tmp",
)  # fmt: skip


class EditorTemp:
    """Temporary and swap files, matched on the file name only."""

    def __init__(self, patterns: Sequence[str] = EDITOR_PATTERNS) -> None:
        self.patterns = tuple(patterns)

    def ignores(self, rel: str) -> bool:
        name = rel.rsplit("/", 1)[-1]
        return any(fnmatch.fnmatchcase(name, p) for p in self.patterns)


def default_filters() -> tuple[Filter, ...]:
    return (IgnoredDirs(), EditorTemp())


def ignored(rel: str, filters: Sequence[Filter]) -> bool:
    return any(f.ignores(rel) for f in filters)


# -- plumbing --------------------------------------------------------------------------


_OVERFLOW = object()


class OverflowProbe(logging.Handler):
    """watchdog reports an inotify queue overflow only as a log warning: catch it."""

    def __init__(self, sink: queue.Queue[object]) -> None:
        super().__init__(logging.WARNING)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        if "overflow" in record.getMessage().lower():
            self.sink.put(_OVERFLOW)


class _Handler(wd_events.FileSystemEventHandler):
    def __init__(self, root: str, filters: Sequence[Filter], sink: queue.Queue[object]):
        self.root = root
        self.filters = filters
        self.sink = sink

    def _rel(self, path: str | bytes) -> str | None:
        text = os.fsdecode(path)
        if text == self.root:
            return None
        if not text.startswith(self.root + os.sep):
            return None
        rel = text[len(self.root) + 1 :].replace(os.sep, "/")
        return None if ignored(rel, self.filters) else rel

    def dispatch(self, event: wd_events.FileSystemEvent) -> None:
        if event.event_type == wd_events.EVENT_TYPE_MOVED:
            pairs = [(event.src_path, MOVED_FROM), (event.dest_path, MOVED_TO)]
        elif event.event_type in _KINDS:
            pairs = [(event.src_path, _KINDS[event.event_type])]
        else:
            return
        for path, kind in pairs:
            rel = self._rel(path) if path else None
            if rel is not None:
                self.sink.put(Change(rel, kind, event.is_directory))


def _collect(
    sink: queue.Queue[object], stop: threading.Event, debounce: float, step: float,
    max_wait: float,
) -> Batch:  # fmt: skip
    """Wait for a first event, then gather until quiet for ``debounce`` (or ``max_wait``).

    After a save that ended (close after write, rename into place) only ``debounce / 5``
    of quiet is needed: what an editor does next (removing its swap or backup file)
    follows within microseconds, and the user is waiting for the agent.
    """
    batch = Batch()
    while not stop.is_set():
        try:
            item = sink.get(timeout=step)
        except queue.Empty:
            continue
        _add(batch, item)
        break
    else:
        return batch
    started = last = time.monotonic()
    while not stop.is_set():
        quiet = debounce / 5 if _ended(batch) else debounce
        now = time.monotonic()
        remaining = min(last + quiet, started + max_wait) - now
        if remaining <= 0:
            break
        try:
            item = sink.get(timeout=min(remaining, step))
        except queue.Empty:
            continue
        _add(batch, item)
        last = time.monotonic()
    return batch


def _ended(batch: Batch) -> bool:
    last = batch.changes[-1] if batch.changes else None
    return last is not None and not last.is_dir and last.kind in (CLOSED, MOVED_TO)


def _add(batch: Batch, item: object) -> None:
    if item is _OVERFLOW:
        batch.overflow = True
    elif isinstance(item, Change):
        batch.changes.append(item)


def watch(
    root: Path,
    stop: threading.Event,
    *,
    debounce: float = 0.05,
    step: float = 0.05,
    max_wait: float = 1.0,
    filters: Sequence[Filter] | None = None,
    started: threading.Event | None = None,
) -> Iterator[Batch]:
    """Yield batches of changes under ``root`` until ``stop`` is set.

    ``started`` is set once the watches are in place: a change made after that is
    reported. ``step`` bounds how long ``stop`` may go unnoticed.
    """
    root_text = os.fspath(root.resolve())
    sink: queue.Queue[object] = queue.Queue()
    probe = OverflowProbe(sink)
    inotify_log = logging.getLogger(_INOTIFY_LOGGER)
    inotify_log.addHandler(probe)
    observer = Observer()
    observer.name = "jpfs-watch"
    handler = _Handler(root_text, tuple(default_filters() if filters is None else filters), sink)
    try:
        observer.schedule(handler, root_text, recursive=True, event_filter=_EVENT_TYPES)
        observer.start()
        if started is not None:
            started.set()
        while not stop.is_set():
            batch = _collect(sink, stop, debounce, step, max_wait)
            if batch:
                yield batch
    finally:
        inotify_log.removeHandler(probe)
        if observer.is_alive():
            observer.stop()
            observer.join()
