"""jpfs.services.daemon.shared: how much free work a claim ahead must leave the peers."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jpfs.services.daemon.shared import free_wanted


def test_a_daemon_alone_claims_ahead_while_anything_is_free() -> None:
    assert free_wanted({}, set(), "me", 4) == 1
    assert free_wanted({"me": 8}, {"me"}, "me", 4) == 1  # its own leases ask nothing


def test_a_peer_short_of_its_runs_and_claims_ahead_wants_the_difference() -> None:
    # Three machines of 4 at the start of a queue's last wave: both peers run 4 and hold
    # nothing ahead yet, so a claim ahead here must leave 4 free for each.
    assert free_wanted({"me": 4, "b": 4, "c": 4}, {"me", "b", "c"}, "me", 4) == 9
    # Both peers hold their runs and as many ahead: nothing more for them.
    assert free_wanted({"b": 8, "c": 8}, {"me", "b", "c"}, "me", 4) == 1
    # A peer short of one (a claim it lost): that one is its.
    assert free_wanted({"b": 8, "c": 7}, {"me", "b", "c"}, "me", 4) == 2
    # A peer that released its last lease lately and holds none: twice its runs.
    assert free_wanted({"b": 8}, {"me", "b", "c"}, "me", 4) == 9


@given(
    holding=st.dictionaries(st.sampled_from("abcd"), st.integers(0, 12), max_size=4),
    size=st.integers(1, 6),
    unseen=st.integers(0, 12),
)
def test_a_peers_claim_not_seen_yet_asks_the_same(
    holding: dict[str, int], size: int, unseen: int
) -> None:
    """Seen or not, a claim of a peer short of its want moves one conversation from the
    free work to that peer's leases: the free work asked for moves with it, so the
    answer (enough free, or not) is the same in a stale view as in a fresh one."""
    working = set(holding) | {"me"}
    for peer in sorted(set(holding)):
        stale = free_wanted(holding, working, "me", size)
        short = max(0, 2 * size - holding[peer])
        claimed = min(unseen, short)  # claims it made that our view does not show yet
        fresh = free_wanted({**holding, peer: holding[peer] + claimed}, working, "me", size)
        assert stale - fresh == claimed
