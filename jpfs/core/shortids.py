"""Short ids for people: each generated segment at its shortest unique prefix.

What a listing shows must be what :func:`jpfs.core.scope.resolve` reads back as the
same conversation, so a segment's prefix is unique among the names
:func:`jpfs.core.scope.children` gives at its level (hidden conversations, and plain
directories a walk descends, included), and under a scope root only that root's
own path is seen at its levels, as resolution sees it. A generated segment
(``c-`` and 26 base-32 characters) keeps at least :data:`MIN_GENERATED` characters
after its ``c-``, as ``git log --oneline`` keeps seven of a hash: a prefix that is
unique today stays readable as an id, and mostly stays unique as siblings are added.
A name a person chose (``refactor``) is shown whole: it is short and means something.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Mapping
from pathlib import Path

from jpfs.core import ids, scope

MIN_GENERATED = 8
GENERATED = re.compile(r"[a-z0-9]+-[0-9a-z]{26}")
# The fewest characters a generated segment shows ("c-" and MIN_GENERATED).
SHORTEST = 2 + MIN_GENERATED


def _common(a: str, b: str) -> int:
    """The length of the prefix ``a`` and ``b`` share, by bisection on slices (a
    character loop cost twice as much at 10,000 siblings)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


class Shortener:
    """Shortens ids against the tree as it is now (each level listed once, on demand).

    ``within``: the scope root the ids are shown under (``--root-id``), whose levels
    show only its own path, so the lengths shown count nothing outside it. ``known``:
    levels a walk of the tree just listed (:attr:`jpfs.core.summaries.Summaries.levels`:
    the same names, sorted), so that a listing does not list each directory twice."""

    def __init__(
        self,
        conv_root: Path,
        within: str | None = None,
        known: Mapping[str, list[str]] | None = None,
    ) -> None:
        self.conv_root = conv_root
        self.scope_path = ids.segments(within or "")
        self._known = known or {}
        self._levels: dict[str, tuple[list[str], dict[str, str]]] = {}
        self._shown: dict[str, str] = {}

    def __call__(self, conv_id: str) -> str:
        """``conv_id`` with each generated segment cut to its shortest unique prefix."""
        shown = self._shown.get(conv_id)
        if shown is None:
            parent, _, name = conv_id.rpartition("/")
            names, level = self._levels.get(parent) or self._level(parent)
            cut = level.get(name) or self._absent(names, name)
            shown = self._shown[conv_id] = f"{self(parent)}/{cut}" if parent else cut
        return shown

    @staticmethod
    def _absent(names: list[str], name: str) -> str:
        """A name not at its level (a removed conversation in `jpfs log`): unique
        against all that is there, so that typed back it names nothing else."""
        at = bisect.bisect_left(names, name)
        before = names[at - 1] if at > 0 else ""
        after = names[at] if at < len(names) else ""
        return _cut(name, max(_common(name, before), _common(name, after)))

    def _level(self, parent: str) -> tuple[list[str], dict[str, str]]:
        """The names at ``parent``'s level, sorted, and each one's short form: a
        name's longest shared prefix is with one of its neighbours in that order."""
        level = self._levels.get(parent)
        if level is None:
            depth = parent.count("/") + 1 if parent else 0
            if depth < len(self.scope_path):
                names = [self.scope_path[depth]]
            elif parent in self._known:
                names = self._known[parent]
            else:
                names = sorted(scope.children(self.conv_root, parent))
            # Below SHORTEST shared characters the cut is the minimum whatever they are:
            # one slice comparison spares most pairs the exact count.
            shared = [
                _common(a, b) if a[:SHORTEST] == b[:SHORTEST] else 0
                for a, b in itertools.pairwise(names)
            ]
            shared = [0, *shared, 0]
            shown = {
                name: _cut(name, max(shared[i], shared[i + 1])) for i, name in enumerate(names)
            }
            level = self._levels[parent] = (names, shown)
        return level


def _cut(name: str, shared: int) -> str:
    """A generated ``name`` at one character past what it shares, and at least
    :data:`MIN_GENERATED` after its ``c-``; any other name whole."""
    if GENERATED.fullmatch(name) is None:
        return name
    keep = max(shared + 1, name.index("-") + 1 + MIN_GENERATED)
    return name if keep >= len(name) else name[:keep]


def shortener(
    conv_root: Path,
    within: str | None = None,
    *,
    full: bool = False,
    known: Mapping[str, list[str]] | None = None,
) -> Shortener:
    """What a listing shows of each id: shortened, or whole with ``full``
    (``--full-ids``)."""
    return _Whole(conv_root) if full else Shortener(conv_root, within, known)


class _Whole(Shortener):
    def __call__(self, conv_id: str) -> str:
        return conv_id
