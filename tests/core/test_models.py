"""The model table and the profile keys it checks: ``thinking``, ``effort`` and
``context_window`` refused before any call when the model would refuse them."""

from __future__ import annotations

import pytest

from jpfs.core import models
from jpfs.core.profiles import normalize
from jpfs.errors import ProfileError


def profile(**keys: object) -> dict[str, object]:
    return {"model": "claude-fable-5", "provider": "anthropic", **keys}


def test_an_adaptive_only_model_thinks_adaptively_by_default_and_is_never_sent_disabled() -> None:
    config = normalize(profile(), "p")
    assert "thinking" not in config  # absent unless given: old snapshots stay as they were
    assert models.setting(config) == "adaptive"
    assert models.thinking_param("claude-fable-5", "adaptive") == {"type": "adaptive"}
    with pytest.raises(ProfileError, match='always thinks: the API refuses thinking = "off"'):
        normalize(profile(thinking="off"), "p")
    with pytest.raises(ProfileError, match="takes no thinking budget"):
        normalize(profile(thinking=4096), "p")


def test_optional_thinking_is_off_by_default_and_sends_nothing() -> None:
    config = normalize(profile(model="claude-sonnet-4-6"), "p")
    assert models.setting(config) == "off"
    assert models.thinking_param("claude-sonnet-4-6", "off") is None
    on = normalize(profile(model="claude-sonnet-4-6", thinking="adaptive", effort="low"), "p")
    assert models.setting(on) == "adaptive"
    budget = normalize(profile(model="claude-sonnet-4-6", thinking=2048), "p")
    assert models.thinking_param("claude-sonnet-4-6", budget["thinking"]) == {
        "type": "enabled",
        "budget_tokens": 2048,
    }


def test_a_model_that_thinks_unless_told_not_to_is_sent_disabled_for_off() -> None:
    assert models.thinking_param("claude-opus-5", "off") == {"type": "disabled"}
    with pytest.raises(ProfileError, match='only at effort "high" or lower'):
        normalize(profile(model="claude-opus-5", thinking="off", effort="max"), "p")


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"model": "claude-sonnet-4-6", "effort": "xhigh"}, "does not take effort 'xhigh'"),
        ({"model": "claude-sonnet-4-5", "effort": "low"}, "takes: none"),
        ({"model": "claude-sonnet-4-5", "thinking": "adaptive"}, "does not think adaptively"),
        ({"effort": "extreme"}, "effort must be one of low, medium, high, xhigh, max"),
        ({"thinking": "on"}, 'thinking must be "adaptive", "off" or a budget'),
        ({"thinking": True}, "'thinking' must be str/int"),
        ({"model": "claude-sonnet-4-6", "thinking": 512}, "at least 1024 tokens"),
        ({"model": "claude-sonnet-4-6", "thinking": 9000}, "below max_tokens"),
        ({"context_window": 100}, "context_window must be at least 1024"),
        ({"provider": "openai", "thinking": "adaptive"}, "applies only to provider"),
    ],
)
def test_a_value_the_model_refuses_is_a_profile_error(
    keys: dict[str, object], message: str
) -> None:
    with pytest.raises(ProfileError, match=message.replace("(", r"\(").replace(")", r"\)")):
        normalize(profile(**keys), "p")


def test_an_unknown_model_gets_what_the_profile_says() -> None:
    config = normalize(profile(model="claude-next-9", thinking="adaptive", effort="max"), "p")
    assert models.setting(config) == "adaptive"
    assert models.thinking_param("claude-next-9", "off") is None  # never "disabled" blind
    assert models.context_window(config) is None


def test_windows_come_from_the_table_or_the_profile() -> None:
    assert models.context_window({"model": "claude-haiku-4-5-20251001"}) == 200_000
    assert models.context_window({"model": "claude-fable-5-1"}) == 1_000_000
    assert models.context_window({"model": "qwen3:8b", "context_window": 8192}) == 8192
    assert models.preserved("claude-fable-5-1") and not models.preserved("claude-fable-5")
