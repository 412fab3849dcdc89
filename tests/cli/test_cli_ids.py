"""Ids people type (#50), through the CLI on real repositories: a unique prefix of each
segment, an exact segment first, ``@`` for the active one, all inside ``--root-id``;
short ids in text listings, whole ids in JSON and with ``--full-ids``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import Result

Cli = Callable[..., Result]

# Generated-form ids made by name, so that what is shared is known: A1 and A2 agree
# on all but their last character, B on nothing past "c-01" with them.
A1 = "c-01aaaaaaaaaa00000000000001"
A2 = "c-01aaaaaaaaaa00000000000002"
B = "c-01bbbbbbbbbb00000000000000"


def new(cli: Cli, *args: str) -> str:
    done = cli("c", "new", "--no-activate", *args)
    assert done.code == 0, done.stderr
    return done.stdout.strip()


def abbreviates(short: str, full: str) -> bool:
    """Whether each segment of ``short`` begins the same segment of ``full``."""
    pairs = list(zip(short.split("/"), full.split("/"), strict=False))
    return short.count("/") == full.count("/") and all(f.startswith(s) for s, f in pairs)


def shown_id(cli: Cli, *args: str) -> str:
    done = cli("c", "show", *args, "--format", "json")
    assert done.code == 0, done.stderr
    return str(json.loads(done.stdout)["id"])


@pytest.fixture
def family(ws: Path, cli: Cli) -> dict[str, str]:
    """beta, betamax; alpha with two generated children; B with one; A1, A2."""
    for name in ("alpha", "beta", "betamax", A1, A2, B):
        new(cli, name)
    kids = {f"kid{n}": new(cli, "--parent", "alpha") for n in (1, 2)}
    return {"bkid": new(cli, "--parent", B), **kids}


def test_a_unique_prefix_names_a_top_level_or_nested_conversation(
    family: dict[str, str], cli: Cli
) -> None:
    assert shown_id(cli, "alp") == "alpha"
    assert shown_id(cli, "c-01b") == B
    # Each segment is a prefix of its own level: c-01b/c-0 names B's one child.
    assert shown_id(cli, "c-01b/c-0") == family["bkid"]
    kid = family["kid1"]
    assert shown_id(cli, "al/" + kid.split("/")[1][:20]) == kid
    # Every command reads them alike: print, log, kill, mail send.
    assert cli("c", "print", "c-01bb", "--format", "json").code == 0
    assert json.loads(cli("log", "alp", "--format", "json").stdout)
    sent = cli("mail", "send", "c-01b/c", "hello")
    assert sent.code == 0, sent.stderr
    killed = cli("kill", "c-01b/c")
    assert killed.code == 0, killed.stderr


def test_an_exact_segment_wins_over_a_prefix(family: dict[str, str], cli: Cli) -> None:
    assert shown_id(cli, "beta") == "beta"  # though it also begins betamax
    assert shown_id(cli, "betam") == "betamax"


def test_an_ambiguous_prefix_is_a_usage_error_listing_a_few_candidates(
    family: dict[str, str], cli: Cli
) -> None:
    done = cli("c", "show", "bet")
    assert done.code == 2 and done.stdout == ""
    assert "'bet' is ambiguous" in done.stderr and "(beta, betamax)" in done.stderr
    assert len(done.stderr.splitlines()) == 1
    for n in range(7):
        new(cli, f"t{n}")
    many = cli("c", "print", "t")
    assert many.code == 2
    assert "it begins 7 conversations (t0, t1, t2, t3, t4 and 2 more)" in many.stderr
    nested = cli("c", "show", "alpha/c-")
    assert nested.code == 2 and f"{family['kid1']}, {family['kid2']}" in nested.stderr
    # A prefix that begins nothing is not found, as a whole id is.
    gone = cli("c", "show", "zz")
    assert gone.code == 1 and "no conversation 'zz'" in gone.stderr


def test_at_names_the_active_conversation(family: dict[str, str], cli: Cli) -> None:
    none = cli("c", "show", "@")
    assert none.code == 1 and "no active conversation" in none.stderr
    assert cli("c", "use", "c-01b").code == 0
    assert shown_id(cli, "@") == B
    assert shown_id(cli, "@/c") == family["bkid"]
    printed = cli("c", "print", "@", "--format", "json")
    assert json.loads(printed.stdout)["id"] == B
    assert json.loads(cli("log", "@", "--format", "json").stdout)[0]["conversation"] in (
        B,
        family["bkid"],
    )


def test_under_root_id_a_prefix_sees_nothing_outside(family: dict[str, str], cli: Cli) -> None:
    new(cli, "alphabet")  # begins like alpha, outside --root-id alpha
    new(cli, "--parent", "beta", "s1")
    new(cli, "--parent", "alpha", "s1")
    new(cli, "--parent", "alpha", "s2")
    # Only alpha is seen at its level: "al" is alpha there, not ambiguous with alphabet.
    assert shown_id(cli, "--root-id", "alpha", "al/s1") == "alpha/s1"
    # Ambiguity counts only alpha's children; beta's s1 is neither named nor counted.
    done = cli("--root-id", "alpha", "c", "show", "alpha/s")
    assert done.code == 2
    assert "it begins 2 conversations (alpha/s1, alpha/s2)" in done.stderr
    # Outside: refused, naming only what was typed and the scope.
    for typed in ("bet", "be/s", "c-01", "alphab"):
        refused = cli("--root-id", "alpha", "c", "show", typed)
        assert refused.code == 1, typed
        assert refused.stderr.startswith(f"jpfs: error: conversation {typed!r} is outside")
        for name in ("beta", "betamax", "alphabet", A1, B):
            assert name not in refused.stderr.replace(f"{typed!r}", "")
    # The active one outside the scope is refused too.
    assert cli("c", "use", "beta").code == 0
    assert cli("--root-id", "alpha", "c", "show", "@").code == 1


def test_text_listings_show_short_ids_and_json_whole_ones(
    family: dict[str, str], ws: Path, cli: Cli
) -> None:
    kid1 = family["kid1"]
    listed = cli("c", "ls").stdout
    # Generated segments cut to their shortest unique prefix, 8 characters at least
    # after "c-"; A1 and A2 need all but their last character, so they show whole.
    assert "\nc-01bbbbbb  " in listed and f"\n{B}" not in listed
    assert f"\n{A1}  " in listed and f"\n{A2}  " in listed
    assert "\nalpha  " in listed and "\nbetamax  " in listed  # names stay whole
    shorts = [line.split()[0] for line in listed.splitlines()[1:]]
    fulls = [r["id"] for r in json.loads(cli("c", "ls", "--format", "json").stdout)]
    assert len(shorts) == len(fulls)
    for short, full in zip(shorts, fulls, strict=True):
        assert abbreviates(short, full)
        # Each short id, typed back, is the same conversation.
        assert shown_id(cli, short) == full
    # Never shorter than 8 after c- ("alpha/c-" and 7): kid1 and kid2, generated
    # apart, may differ at their 8th character, and then show 8 (it failed so once).
    assert f"{kid1[:15]}  " not in listed
    whole = cli("c", "ls", "--full-ids").stdout
    assert f"\n{kid1}  " in whole and f"\n{B}/" in whole
    # tree and top, log and cost: short in text, whole in JSON.
    tree = cli("tree").stdout
    assert "\nc-01bbbbbb  " in tree and "\n  c-" in tree and kid1.split("/")[1] not in tree
    assert kid1.split("/")[1] in cli("tree", "--full-ids").stdout
    rows = json.loads(cli("tree", "--format", "json").stdout)
    assert kid1 in [r["id"] for r in rows]
    top = cli("top", "-n", "1").stdout
    assert "\nc-01bbbbbb  " in top and B not in top
    log = cli("log").stdout
    assert "c-01bbbbbb/c-" in log and family["bkid"] not in log
    assert family["bkid"] in cli("log", "--full-ids").stdout
    entries = json.loads(cli("log", "--format", "json").stdout)
    assert family["bkid"] in [e["conversation"] for e in entries]


def test_grep_and_cost_show_short_ids(family: dict[str, str], ws: Path, cli: Cli) -> None:
    bkid = family["bkid"]
    (ws / "conversations" / bkid / "task.md").write_text("find the needle\n")
    found = cli("c", "grep", "needle")
    assert found.code == 0, found.stderr
    short = found.stdout.split(":", 1)[0]
    assert abbreviates(short, bkid) and short != bkid and shown_id(cli, short) == bkid
    assert cli("c", "grep", "needle", "--full-ids").stdout.startswith(f"{bkid}:task.md:1:")
    assert cli("c", "grep", "-l", "needle").stdout == f"{short}:task.md\n"
    assert json.loads(cli("c", "grep", "needle", "--format", "json").stdout)[0]["id"] == bkid
    cost = cli("cost").stdout  # no calls yet: only the total; the flag is taken
    assert cost.startswith("CONVERSATION") and cli("cost", "--full-ids").code == 0


def test_short_ids_under_root_id_count_nothing_outside(ws: Path, cli: Cli) -> None:
    # Outside the scope a sibling shares all but one character with the scope root;
    # inside, the root's segment is alone at its level: 8 after c-, as it resolves there.
    new(cli, A1)
    new(cli, A2)
    kid = new(cli, "--parent", A1)
    scoped = cli("--root-id", A1, "c", "ls").stdout
    assert f"\nc-01aaaaaa/{kid.split('/')[1][:10]}  " in scoped
    assert A2 not in scoped and "c-01aaaaaaaaaa0" not in scoped
    first = scoped.splitlines()[1].split()[0]
    assert shown_id(cli, "--root-id", A1, first) == kid
