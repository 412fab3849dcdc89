"""The typed view of an agent's configuration (jpfs.core.agentconfig): a normalized
profile read as it was written, a snapshot's absent or mistyped keys as their defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from jpfs.core import agentconfig, profiles
from jpfs.core.agentconfig import SUB, TOP


def test_a_normalized_profile_reads_as_written(tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "r.toml").write_text(
        'model = "claude-sonnet-4-6"\nmax_tokens = 4000\ntimeout = 30\nworkspace = "branch"\n'
        '[system]\nrole = "You review."\nstyle = "Be brief."\n'
        '[tools]\nallow = ["jp_query"]\nagents = ["helper"]\nwrite = ["src/**"]\n'
        "[limits]\nmax_turns = 5\nbudget_usd = 2\n"
        "[onboarding]\nenabled = true\n",
        encoding="utf-8",
    )
    profile = profiles.load(agents, "r")
    got = profile.settings
    assert (got.name, got.model, got.provider) == ("r", "claude-sonnet-4-6", "anthropic")
    assert (got.max_tokens, got.timeout, got.workspace) == (4000, 30.0, "branch")
    assert isinstance(got.timeout, float) and isinstance(got.limits.budget_usd, float)
    assert got.system == ("You review.", "Be brief.")
    assert got.tools.allow == ("jp_query",) and got.tools.agents == ("helper",)
    assert got.tools.write == ("src/**",) and got.tools.expose == ()
    assert (got.limits.max_turns, got.limits.max_children, got.limits.max_depth) == (5, 8, 3)
    assert (got.limits.budget_tokens, got.limits.budget_usd) == (None, 2.0)
    assert got.onboarding.enabled and got.onboarding.max_rounds == 3
    assert got.overridable == ("model",) and got.raw is profile.config
    assert profiles.system_prompt(got) == profiles.system_prompt(profile.config)


def test_an_empty_snapshot_reads_as_the_declared_defaults() -> None:
    got = agentconfig.view({})
    assert got.model == "" and got.provider == TOP["provider"][1]
    assert got.max_tokens == TOP["max_tokens"][1] and got.timeout == TOP["timeout"][1]
    assert got.limits.max_turns == SUB["limits"]["max_turns"][1]
    assert got.onboarding.max_rounds == SUB["onboarding"]["max_rounds"][1]
    assert got.limits.max_run_seconds is None and got.thinking is None


@pytest.mark.parametrize(
    "snapshot",
    [
        {"limits": "none"},
        {"limits": {"budget_tokens": True, "budget_usd": "1", "max_run_seconds": [1]}},
        {"max_tokens": "8", "timeout": False, "tools": {"agents": "helper"}},
    ],
)
def test_a_mistyped_key_reads_as_its_default(snapshot: dict[str, object]) -> None:
    # Hand-edited files: a listing or a budget check must not fail on them (a run
    # refuses them when it admits the snapshot).
    got = agentconfig.view(snapshot)
    assert got.limits.budget_tokens is None and got.limits.budget_usd is None
    assert got.limits.max_run_seconds is None
    assert got.max_tokens == 8192 and got.timeout == 600.0 and got.tools.agents == ()
