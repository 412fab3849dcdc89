"""The openai provider's profile keys: validated, refused where they cannot apply, and
never widened by a conversation's snapshot."""

from __future__ import annotations

from pathlib import Path

import pytest

from jpfs.core import profiles
from jpfs.errors import ProfileError


def load(tmp_path: Path, text: str) -> profiles.Profile:
    agents = tmp_path / "agents"
    agents.mkdir(exist_ok=True)
    (agents / "p.toml").write_text(text, encoding="utf-8")
    return profiles.load(agents, "p")


def test_keys_are_kept_and_absent_ones_stay_absent(tmp_path: Path) -> None:
    p = load(tmp_path, 'model = "m"\nprovider = "openai"\nbase_url = "http://h:1/v1"\n')
    assert p.config["base_url"] == "http://h:1/v1" and "api_key_env" not in p.config
    plain = load(tmp_path, 'model = "m"\n')
    assert "base_url" not in plain.config and "api_key_env" not in plain.config


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('provider = "anthropic"\nbase_url = "http://h/v1"', "applies only to provider"),
        ('provider = "script"\napi_key_env = "K"', "applies only to provider"),
        ('provider = "openai"\nbase_url = "localhost:11434"', "must be an http"),
        ('provider = "openai"\nbase_url = "ftp://h/v1"', "must be an http"),
        ('provider = "openai"\napi_key_env = "sk-123 secret"', "must name an environment"),
        ('provider = "openai"\nbase_url = 3', "must be str"),
    ],
)
def test_bad_keys_are_refused(tmp_path: Path, text: str, why: str) -> None:
    with pytest.raises(ProfileError, match=why):
        load(tmp_path, f'model = "m"\n{text}\n')


def test_a_snapshot_cannot_move_the_server_or_the_key(tmp_path: Path) -> None:
    p = load(tmp_path, 'model = "m"\nprovider = "openai"\nbase_url = "http://h:1/v1"\n')
    assert profiles.admit(dict(p.config), p)["base_url"] == "http://h:1/v1"
    for key, value in (("base_url", "http://evil/v1"), ("api_key_env", "OTHER_KEY")):
        with pytest.raises(ProfileError, match=f"asks for more.*{key}"):
            profiles.admit({**p.config, key: value}, p)
