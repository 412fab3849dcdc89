"""The public value types: who commits (:class:`Identity`) and what (:class:`Change`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_TRAILER_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*\Z")


@dataclass(frozen=True)
class Identity:
    """A commit author or committer."""

    name: str
    email: str

    def __post_init__(self) -> None:
        for value in (self.name, self.email):
            if any(ch in value for ch in "<>\n\r\0"):
                raise ValueError(f"invalid character in identity {self.name!r} <{self.email}>")


@dataclass(frozen=True)
class Change:
    """One logical state change: snapshot ``paths`` and record them under ``subject``.

    ``creates``: (path, text) of new files the committer makes, each all or nothing and
    only if no file has its name, right before it snapshots ``paths`` (which must
    include them): a writer's new file and its commit in one step of the committing
    thread (see :meth:`jpfs.infra.committer.Committer.commit`)."""

    paths: tuple[str, ...]
    subject: str
    trailers: tuple[tuple[str, str], ...] = ()
    author: Identity | None = None
    creates: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.paths, str):
            raise TypeError("Change.paths must be a tuple of paths, not a string")
        for created in self.creates:
            if not (
                isinstance(created, tuple)
                and len(created) == 2
                and all(isinstance(part, str) for part in created)
            ):
                raise TypeError(f"Change.creates holds (path, text) pairs, not {created!r}")
        if not self.subject.strip() or "\n" in self.subject or "\r" in self.subject:
            raise ValueError(f"commit subject must be one non-empty line: {self.subject!r}")
        for key, value in self.trailers:
            if not _TRAILER_KEY.match(key):
                raise ValueError(f"invalid trailer key {key!r}")
            if "\n" in value or "\r" in value:
                raise ValueError(f"trailer {key} must be a single line: {value!r}")
