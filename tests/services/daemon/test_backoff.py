"""The daemon's one backoff: a doubling wait per key, capped, started over once forgotten."""

from __future__ import annotations

from jpfs.services.daemon.backoff import Backoff


def test_waits_double_up_to_the_cap_and_start_over_once_forgotten() -> None:
    waits = Backoff(first=1.0, most=60.0)
    assert "a" not in waits
    assert [waits.next("a") for _ in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert "a" in waits
    assert waits.next("b") == 1.0  # each key paced on its own
    waits.forget("a")
    assert "a" not in waits and waits.next("a") == 1.0


def test_the_lock_wait_starts_at_a_tenth_of_a_second() -> None:
    waits = Backoff(first=0.1, most=2.0)
    assert [waits.next("c") for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0]
