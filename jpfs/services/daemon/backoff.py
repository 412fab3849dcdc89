"""The daemon's one backoff: how long until something that failed is tried again.

Each key's wait doubles at each failure in a row, from ``first`` up to ``most``, and
starts again from ``first`` once forgotten (it went through). The reconciler paces its
looks at a conversation locked elsewhere, or whose repository fails, with it; the
service its runs stopped by a repository fault.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Backoff:
    first: float
    most: float
    # key -> the wait its last failure got
    _waits: dict[str, float] = field(default_factory=dict)

    def next(self, key: str) -> float:
        """Another failure of ``key``: seconds to wait before its next try."""
        wait = min(self._waits.get(key, self.first / 2) * 2, self.most)
        self._waits[key] = wait
        return wait

    def forget(self, key: str) -> None:
        """``key`` went through: its next failure waits ``first`` again."""
        self._waits.pop(key, None)

    def __contains__(self, key: str) -> bool:
        """Whether ``key`` is being paced (failed, not forgotten since)."""
        return key in self._waits
