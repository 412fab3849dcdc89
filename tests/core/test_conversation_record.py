"""conversation.toml: the cheap summary listings use agrees with the full parse."""

from __future__ import annotations

from pathlib import Path

import pytest

from jpfs.core.conversation import Conversation, create
from jpfs.errors import FormatError


def make(tmp_path: Path, onboarding: dict[str, object]) -> Conversation:
    config = {"model": "m", "system": {"role": "x [config] y"}, "onboarding": onboarding,
              "tools": {"allow": ["a"]}}  # fmt: skip
    return create(tmp_path, "a", agent="researcher", title="T", config=config)


@pytest.mark.parametrize("enabled", [True, False])
def test_summary_matches_the_full_record(tmp_path: Path, enabled: bool) -> None:
    conv = make(tmp_path, {"enabled": enabled, "max_rounds": 2})
    full, head = conv.meta(), conv.summary()
    assert head["config"] == {"onboarding": full["config"]["onboarding"]}
    assert {k: v for k, v in head.items() if k != "config"} == {
        k: v for k, v in full.items() if k != "config"
    }
    assert head["agent"] == "researcher" and head["title"] == "T"


def test_summary_survives_human_edits_and_falls_back(tmp_path: Path) -> None:
    conv = make(tmp_path, {"enabled": True})
    text = conv.toml_path.read_text()
    conv.toml_path.write_text(
        "# my notes\n" + text.replace("[config]\n", "[config] # snapshot\n", 1)
    )
    assert conv.summary()["config"]["onboarding"]["enabled"] is True
    conv.toml_path.write_text('title = "no snapshot"\n')
    assert conv.summary() == {"title": "no snapshot"}
    conv.toml_path.write_text("title = \n[config]\n")
    with pytest.raises(FormatError):
        conv.summary()
