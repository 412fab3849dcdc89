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


def test_a_claim_lost_to_a_peer_is_neither_free_nor_wanted() -> None:
    # Our view: b holds 4 of its 8. Two of the four it still wants it claimed after our
    # view; we lost the race for both: they no longer count as free, nor as b's want.
    assert free_wanted({"b": 4}, {"me", "b"}, "me", 4) == 5
    assert free_wanted({"b": 4}, {"me", "b"}, "me", 4, unseen=2) == 3
    # However many we lost, our own one is still wanted.
    assert free_wanted({"b": 8}, {"me", "b"}, "me", 4, unseen=3) == 1


@given(
    holding=st.dictionaries(st.sampled_from("abcd"), st.integers(0, 12), min_size=1, max_size=4),
    size=st.integers(1, 6),
    free=st.integers(0, 30),
    unseen=st.lists(st.integers(0, 12), min_size=4, max_size=4),
    lost=st.lists(st.integers(0, 12), min_size=4, max_size=4),
)
def test_a_stale_view_with_lost_claims_decides_as_a_fresh_one(
    holding: dict[str, int], size: int, free: int, unseen: list[int], lost: list[int]
) -> None:
    """Each peer claimed some of what it wants after our view (our view shows them
    free), and we lost the race for some of those: whether one more claim ahead leaves
    the peers their share is answered the same as with a fresh view. Before, a lost
    claim left the free work and not the want: the machine whose view was the stalest
    (the one that started last) held back while work was free, and a peer took it ahead
    of a slot, a wave more than the others."""
    working = set(holding) | {"me"}
    peers = sorted(holding)
    claimed = {
        p: min(n, max(0, 2 * size - holding[p])) for p, n in zip(peers, unseen, strict=False)
    }
    lost_to = {p: min(n, claimed[p]) for p, n in zip(peers, lost, strict=False)}
    fresh_found = free
    fresh_wanted = free_wanted({p: holding[p] + claimed[p] for p in peers}, working, "me", size)
    stale_found = free + sum(claimed.values()) - sum(lost_to.values())
    stale_wanted = free_wanted(holding, working, "me", size, unseen=sum(lost_to.values()))
    assert (stale_found >= stale_wanted) == (fresh_found >= fresh_wanted)
    assert stale_found - stale_wanted == fresh_found - fresh_wanted
