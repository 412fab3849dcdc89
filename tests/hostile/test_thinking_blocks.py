"""Thinking blocks from a server, whatever they hold: recorded byte for byte and sent back
first, or refused as a malformed reply, never a crash nor a changed byte."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jpfs.core import frontmatter
from jpfs.core.conversation import create
from jpfs.core.messages import to_messages
from jpfs.errors import ProviderError
from jpfs.infra.providers.anthropic_reply import reply_from

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
# What JSON can carry, lone surrogates included (a hostile or broken server's).
TEXT = st.text(st.one_of(st.characters(), st.sampled_from(["\ud800", "\udfff"])), max_size=300)


@SETTINGS
@given(thinking=TEXT, signature=TEXT, data=TEXT)
def test_a_servers_thinking_is_kept_byte_for_byte_or_refused(
    tmp_path_factory,
    thinking: str,
    signature: str,
    data: str,  # type: ignore[no-untyped-def]
) -> None:
    blocks = [
        {"type": "thinking", "thinking": thinking, "signature": signature},
        {"type": "redacted_thinking", "data": data},
    ]
    body = json.loads(json.dumps({"content": [*blocks, {"type": "text", "text": "ok"}]}))
    try:
        reply = reply_from(body, 200)
    except ProviderError as exc:
        assert "malformed" in str(exc)
        return
    conv = create(Path(tmp_path_factory.mktemp("c")), "c", agent="a")
    conv.append_event("user", "task")
    ev = conv.append_event("assistant", reply.text, {"thinking": list(reply.thinking)})
    meta, _ = frontmatter.parse(ev.path.read_text(encoding="utf-8"))
    if meta.get("redacted"):
        return  # a secret in it: redacted in the record, counted in its front matter
    assert meta["thinking"] == blocks
    (_, assistant) = to_messages(conv.events())
    assert assistant["content"][:2] == blocks
