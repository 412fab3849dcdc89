"""``jpfs doctor``: each check says what is wrong and what to do; exit 1 on a failure."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import Result, git, write_profile


def checks(cli: Callable[..., Result], *args: str) -> tuple[int, dict[str, dict[str, str]]]:
    done = cli("doctor", "--format", "json", *args)
    return done.code, {c["name"]: c for c in json.loads(done.stdout)}


def test_a_fresh_workspace_without_a_key(
    ws: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    code, found = checks(cli)
    assert code == 0
    for name in ("git", "workspace", "record", "config", "profile default", "profile demo"):
        assert found[name]["status"] == "ok", found[name]
    assert found["api key"]["status"] == "warn" and "--agent demo" in found["api key"]["fix"]
    assert found["daemon"]["status"] == "warn" and "jpfs daemon start" in found["daemon"]["fix"]
    text = cli("doctor").stdout
    assert text.splitlines()[0].split() == ["CHECK", "STATUS", "DETAIL", "FIX"]


def test_a_broken_profile_and_a_lost_record_fail_with_the_fix(
    ws: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "set")
    from jpfs.core.config import set_in_file

    write_profile(ws, "fresh", 'model = "m"\n[tools\n')
    set_in_file(ws / ".jpfs" / "config.toml", "agents.allowed", '["default", "fresh"]')
    git(ws, "worktree", "remove", "--force", "conversations")
    code, found = checks(cli)
    assert code == 1
    assert found["profile fresh"]["status"] == "fail"
    assert "fresh.toml" in found["profile fresh"]["detail"]
    assert found["record"]["status"] == "fail" and "jpfs init" in found["record"]["fix"]
    assert found["api key"]["status"] == "ok"


def test_outside_a_workspace(tmp_path: Path, cli: Callable[..., Result]) -> None:
    code, found = checks(cli, "-w", str(tmp_path))
    assert code == 1
    assert found["workspace"]["status"] == "fail" and "jpfs init" in found["workspace"]["fix"]


def test_on_a_branch_without_jpfs_the_kept_config_is_a_warning(
    ws: Path, cli: Callable[..., Result]
) -> None:
    (ws / ".jpfs" / "config.toml").unlink()  # as a checkout of an older branch leaves it
    code, found = checks(cli)
    assert code == 0
    assert found["config"]["status"] == "warn"
    assert "missing on this branch" in found["config"]["detail"]
    assert "check out a branch with .jpfs/" in found["config"]["fix"]


def test_an_openai_default_agent_is_checked_for_its_own_key(
    ws: Path, cli: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "LOCAL_KEY"):
        monkeypatch.delenv(name, raising=False)
    write_profile(ws, "gpt", 'model = "gpt-4.1-mini"\nprovider = "openai"\n')
    write_profile(
        ws,
        "local",
        'model = "qwen3:8b"\nprovider = "openai"\nbase_url = "http://127.0.0.1:1/v1"\n'
        'api_key_env = "LOCAL_KEY"\n',
    )
    assert cli("config", "set", "agents.allowed", '["gpt", "local"]').code == 0
    assert cli("config", "set", "conversations.default_agent", "gpt").code == 0
    _, found = checks(cli)
    assert found["api key"]["status"] == "warn", found["api key"]
    assert "OPENAI_API_KEY" in found["api key"]["detail"]
    assert "base_url" in found["api key"]["fix"]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert checks(cli)[1]["api key"]["status"] == "ok"
    assert cli("config", "set", "conversations.default_agent", "local").code == 0
    _, found = checks(cli)
    assert found["api key"]["status"] == "ok" and "server of its own" in found["api key"]["detail"]
