"""RFD 051's command templates: the ``jp`` command lines behind each tool, run as
``jpfs`` command lines (in-process, and the seed's own shell script under bash).

Where a template's flag has no jpfs counterpart the test shows what jpfs does with the
seed's line as written, and the jpfs line that does the seed's job (protocol/seeds.md).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jpfs.core import tree
from jpfs.core.conversation import Conversation, now
from jpfs.core.workspace import open_workspace
from jpfs.services.conversations.lifecycle import gc
from tests.conftest import Result, grep_brief, write_profile
from tests.messages_server import Router, last_user_text, text_reply
from tests.seeds.conftest import MAIN_PROMPT, RESEARCHER_PROMPT

Cli = Callable[..., Result]
QUERY = "Find all error types in jp_llm."
FOLLOW_UP = "How does retry.rs decide which Error variants are retryable?"
ANSWER = "jp_llm defines two error types: Error and StreamError."
RETRY = "retry.rs matches on Error variants in `is_retryable()`:\n- RateLimit => always retry"

# RFD 051, jp_query's "Command template", as the seed writes it.
JP_QUERY_SH = r"""#!/usr/bin/env bash
set -euo pipefail

CONVERSATION_ID="{{context.conversation_id}}"
CONFIG="{{tool.arguments.config}}"
QUERY="{{tool.arguments.query}}"
SUB_ID="{{tool.arguments.id}}"

# Validate overrides — only assistant.model is allowed.
OVERRIDES=()
{{#for override in tool.arguments.overrides}}
if [[ "{{override}}" != assistant.model=* ]]; then
  echo "Error: only assistant.model overrides are allowed, got: {{override}}"
  exit 1
fi
OVERRIDES+=(--cfg "{{override}}")
{{/for}}

if [ "$SUB_ID" = "new" ]; then
  # Create a child conversation with an isolated config.
  # --cfg=NONE resets all config to defaults, then the agent profile
  # provides a self-contained configuration.
  #
  # `conversation fork --last=0` creates a blank child of the current
  # conversation and prints its ID to stdout (RFD 050).
  SUB_ID=$(jp conversation fork "$CONVERSATION_ID" \
    --last=0 \
    --cfg=NONE \
    --cfg=".jp/config/${CONFIG}.toml" \
    "${OVERRIDES[@]}" \
    --hidden)

  # Send the query to the new conversation.
  # --no-activate prevents this from becoming the user's active conversation.
  # --root-id constrains the conversation to the current subtree.
  OUTPUT=$(jp query \
    --non-interactive \
    --id="$SUB_ID" \
    --no-activate \
    --root-id="$CONVERSATION_ID" \
    "${OVERRIDES[@]}" \
    "$QUERY" 2>/dev/null)
else
  # Continue the existing sub-conversation.
  # No --cfg=NONE here — the conversation carries its own config.
  # --root-id ensures the LLM-provided ID is a descendant.
  OUTPUT=$(jp query \
    "${OVERRIDES[@]}" \
    --non-interactive \
    --id="$SUB_ID" \
    --no-activate \
    --root-id="$CONVERSATION_ID" \
    "$QUERY" 2>/dev/null)
fi

echo "<response conversation_id=\"${SUB_ID}\">"
echo "$OUTPUT"
echo "</response>"
"""


# RFD 051's jp_agent_researcher.toml as the seed writes it (JP's configuration format).
JP_RESEARCHER_TOML = '''\
[assistant]
model = "anthropic/claude-sonnet-4-20250514"

[[assistant.system_prompt_sections]]
content = """
You are a research assistant. Your job is to investigate codebases, find
relevant code, and produce clear, concise summaries. Focus on facts: what
exists, where it is, how it's structured, and how it's used.

Do not write or modify code. Do not suggest changes. Report what you find.
"""

# Enable only read-only tools.
[conversation.tools.fs_read_file]
source = "local"
run = "unattended"
command = "..."

[conversation.tools.fs_grep_files]
source = "local"
run = "unattended"
command = "..."

[conversation.tools.fs_list_files]
source = "local"
run = "unattended"
command = "..."

# Suppress chrome so stdout is clean for capture.
[style]
reasoning.display = "hidden"
tool_call.show = false
'''


def with_jp_profile(ws: Path) -> None:
    """The file the template's `--cfg=".jp/config/${CONFIG}.toml"` names."""
    path = ws / ".jp" / "config" / "agent" / "researcher.toml"
    path.parent.mkdir(parents=True)
    path.write_text(JP_RESEARCHER_TOML, encoding="utf-8")


def render(template: str, context_id: str, args: dict[str, Any]) -> str:
    """The template engine's job: fill in the context and the tool arguments."""

    def each(m: re.Match[str]) -> str:
        return "".join(m.group(1).replace("{{override}}", o) for o in args.get("overrides", []))

    text = re.sub(r"\{\{#for override in tool\.arguments\.overrides\}\}(.*?)\{\{/for\}\}",
                  each, template, flags=re.S)  # fmt: skip
    text = text.replace("{{context.conversation_id}}", context_id)
    for key in ("config", "query", "id"):
        text = text.replace("{{tool.arguments." + key + "}}", str(args.get(key, "")))
    return text


def run_script(ws: Path, script: str) -> subprocess.CompletedProcess[str]:
    """The script under bash, ``jp`` being jpfs (the only change to the seed's text)."""
    jp = 'jp() { "$JPFS_PYTHON" -m jpfs "$@"; }\n'
    script = script.replace("set -euo pipefail\n", "set -euo pipefail\n" + jp, 1)
    env = {**os.environ, "JPFS_PYTHON": sys.executable}
    return subprocess.run(
        ["bash", "-c", script], cwd=ws, env=env, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip


@pytest.fixture
def main_ws(rfd_ws: Path, api_env: Any, cli: Cli) -> Path:
    """RFD 051's main agent's conversation, ``main``; sub-agents answer from the server."""

    def researcher(request: dict[str, Any]) -> Any:
        asked = last_user_text(request)
        return text_reply(RETRY if "retry.rs" in asked else ANSWER)

    api_env.responder = (
        Router()
        .on_system(RESEARCHER_PROMPT, researcher)
        .on_system(MAIN_PROMPT, text_reply("answered with the main profile"))
    )
    assert cli("conversation", "new", "main", "--agent", "main", "--no-activate").code == 0
    return rfd_ws


def new_sub_agent(ws_dir: Path, cli: Cli, *extra: str, text: str = QUERY) -> str:
    """jpfs's one-step form of the template's "new" path (see the test below)."""
    ws = open_workspace(ws_dir)
    before = set(tree.walk(ws.conv_root, "main"))
    done = cli(
        "query", "--new", "--agent", "researcher", "--root-id=main", "--no-activate",
        "--non-interactive", *extra, text,
    )  # fmt: skip
    assert done.code == 0, done.stderr
    (child,) = set(tree.walk(ws.conv_root, "main")) - before
    return child


def test_the_template_new_path(main_ws: Path, cli: Cli) -> None:
    # jp conversation fork "$CONVERSATION_ID" --last=0 --cfg=NONE
    #   --cfg=".jp/config/${CONFIG}.toml" --hidden
    # --cfg layers are the workspace's configuration; a profile is not one of them.
    with_jp_profile(main_ws)
    seed = cli(
        "conversation", "fork", "main", "--last=0", "--cfg=NONE",
        "--cfg=.jp/config/agent/researcher.toml", "--hidden",
    )  # fmt: skip
    assert seed.code == 1 and "unknown key 'assistant.model'" in seed.stderr
    assert list(tree.walk(open_workspace(main_ws).conv_root, "main")) == []
    # Without the config options: a blank, hidden child, its id alone on stdout.
    forked = cli("conversation", "fork", "main", "--last=0", "--hidden")
    sub = forked.stdout.strip()
    assert forked.code == 0 and forked.stdout == f"{sub}\n" and sub.startswith("main/c-")
    conv = Conversation(open_workspace(main_ws).conv_root, sub)
    assert conv.events() == [] and conv.read("task.md") is None
    assert conv.meta()["hidden"] is True and conv.meta()["agent"] == "main"

    # jp query --non-interactive --id="$SUB_ID" --no-activate --root-id="$CONVERSATION_ID"
    #   "$QUERY" 2>/dev/null: stdout is the answer alone.
    done = cli("query", "--non-interactive", f"--id={sub}", "--no-activate", "--root-id=main",
               QUERY)  # fmt: skip
    assert done.code == 0 and done.stdout == "answered with the main profile\n"
    assert cli("conversation", "show").code == 1  # --no-activate: nothing became active

    # jpfs's line for the whole "new" path: the profile is chosen when it is created.
    child = new_sub_agent(main_ws, cli, "--hidden")
    conv = Conversation(open_workspace(main_ws).conv_root, child)
    assert child.startswith("main/c-") and conv.meta()["agent"] == "researcher"
    assert conv.meta()["hidden"] is True and conv.read("result.md") is not None
    assert cli("conversation", "show").code == 1


def test_the_template_script_as_written(main_ws: Path, cli: Cli) -> None:
    child = new_sub_agent(main_ws, cli)
    # The continue path, verbatim: the sub-agent's answer wrapped with its id.
    done = run_script(
        main_ws, render(JP_QUERY_SH, "main", {"config": "agent/researcher", "id": child,
                                              "query": FOLLOW_UP})
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == f'<response conversation_id="{child}">\n{RETRY}\n</response>\n'
    # An id outside the subtree: a hard error, nothing printed.
    assert cli("conversation", "new", "other", "--no-activate").code == 0
    escaped = run_script(main_ws, render(JP_QUERY_SH, "main", {"id": "other", "query": "hi"}))
    assert escaped.returncode == 1 and escaped.stdout == ""
    # The new path stops at the fork: its --cfg names a JP profile, not a config layer.
    with_jp_profile(main_ws)
    new = run_script(
        main_ws,
        render(JP_QUERY_SH, "main", {"config": "agent/researcher", "id": "new", "query": QUERY}),
    )
    assert new.returncode == 1 and "unknown key 'assistant.model'" in new.stderr


def test_list_print_and_grep_templates(main_ws: Path, cli: Cli) -> None:
    seen = new_sub_agent(main_ws, cli)
    cli("query", "--non-interactive", f"--id={seen}", "--no-activate", "--root-id=main", FOLLOW_UP)
    hidden = new_sub_agent(main_ws, cli, "--hidden", text="How is RateLimit retried?")

    # jp conversation ls --root="{{context.conversation_id}}" --hidden --format=json
    listed = cli("conversation", "ls", "--root=main", "--hidden", "--format=json")
    rows = json.loads(listed.stdout)
    assert [r["id"] for r in rows] == sorted([seen, hidden])
    assert {r["id"]: r["events_count"] for r in rows} == {seen: 4, hidden: 2}
    assert {r["id"]: r["title"] for r in rows}[seen] == QUERY
    # Without --hidden, hidden sub-conversations stay out of the listing.
    plain = json.loads(cli("conversation", "ls", "--root=main", "--format=json").stdout)
    assert [r["id"] for r in plain] == [seen]

    # jp conversation print "{{tool.arguments.id}}" --root-id="{{context.conversation_id}}"
    #   [--last={{tool.arguments.last}}]
    full = cli("conversation", "print", seen, "--root-id=main")
    assert full.code == 0 and QUERY in full.stdout and RETRY in full.stdout
    last = cli("conversation", "print", seen, "--root-id=main", "--last=1")
    assert RETRY in last.stdout and ANSWER not in last.stdout
    assert "## Task" not in last.stdout and last.stdout.count("\n### 0") == 1

    # jp conversation grep --id="{{tool.arguments.id}}" --root-id="..." -i "PATTERN"
    one = cli(
        "conversation", "grep", f"--id={seen}", "--root-id=main", "-i", "IS_RETRYABLE", "--full-ids"
    )
    assert one.code == 0
    assert set(grep_brief(one.stdout)) == {f"{seen}: {RETRY.splitlines()[0]}"}
    # jp conversation grep --root="{{context.conversation_id}}" --hidden -i "PATTERN"
    every = cli("conversation", "grep", "--root=main", "--hidden", "-i", "RATELIMIT", "--full-ids")
    assert {line.split(": ", 1)[0] for line in grep_brief(every.stdout)} == {seen, hidden}

    # --root-id: an id outside the subtree is a hard error (one line), for each command.
    assert cli("conversation", "new", "other", "--no-activate").code == 0
    for argv in (
        ("conversation", "print", "other", "--root-id=main"),
        ("conversation", "grep", "--id=other", "--root-id=main", "-i", "x"),
        ("query", "--non-interactive", "--id=other", "--no-activate", "--root-id=main", "hi"),
    ):
        refused = cli(*argv)
        assert refused.code == 1 and refused.stdout == "", argv
        assert "outside the allowed subtree" in refused.stderr


def test_tmp_hidden_and_cascade_keep_storage_in_check(main_ws: Path, cli: Cli) -> None:
    """Tradeoffs, "Conversation storage growth": `--tmp` auto-expires ephemeral
    sub-conversations, `--hidden` keeps them out of `conversation ls`, and removing the
    parent with `--cascade` cleans up the entire subtree."""
    kept = new_sub_agent(main_ws, cli)
    tmp = new_sub_agent(main_ws, cli, "--tmp", "30m", "--hidden")
    expires = Conversation(open_workspace(main_ws).conv_root, tmp).meta()["expires"]
    assert dt.timedelta(minutes=29) < expires - now() <= dt.timedelta(minutes=30)
    assert tmp not in cli("conversation", "ls").stdout
    removed, _ = gc(open_workspace(main_ws), at=now() + dt.timedelta(hours=1))
    assert removed == [tmp]
    listed = json.loads(cli("conversation", "ls", "--format=json").stdout)
    assert [r["id"] for r in listed] == ["main", kept]
    assert cli("conversation", "rm", "main", "--cascade").code == 0
    assert json.loads(cli("conversation", "ls", "--format=json").stdout) == []


def test_cfg_none_resets_the_configuration(ws: Path, cli: Cli, tmp_path: Path) -> None:
    """RFD 038's `--cfg=NONE` then `--cfg=FILE.toml`, on jpfs's (workspace) config."""
    assert cli("config", "set", "daemon.max_agents", "9").code == 0
    assert cli("config", "get", "daemon.max_agents").stdout == "9\n"
    assert cli("--cfg=NONE", "config", "get", "daemon.max_agents").stdout == "4\n"
    layer = tmp_path / "layer.toml"
    layer.write_text("[daemon]\nmax_agents = 2\n", encoding="utf-8")
    got = cli("--cfg=NONE", f"--cfg={layer}", "config", "get", "daemon.max_agents")
    assert got.stdout == "2\n"


def test_conversation_fork_of_a_turn_in_flight_copies_no_placeholder(ws: Path, cli: Cli) -> None:
    """`conversation fork` of a conversation whose last settled turn is the user's (its
    model is calling tools): the turn in flight is copied as its text alone, or not at
    all without text; never as a placeholder turn or as tool calls the copy would run."""
    from jpfs.core import frontmatter, messages
    from jpfs.core.state import State

    assert cli("conversation", "new", "busy", "--agent", "researcher").code == 0
    conv = Conversation(open_workspace(ws).conv_root, "busy")
    conv.append_event("user", "Find the error types.\n")
    call = {"id": "toolu_1", "name": "fs_grep_files", "input": {"pattern": "enum"}}
    conv.append_event("assistant", "", {"tool_calls": [call], "stop_reason": "tool_use"})
    conv.append_event("tool", "src/error.rs:3: enum Error", {"tool_call_id": "toolu_1"})

    silent = Conversation(conv.root, cli("conversation", "fork", "busy").stdout.strip())
    assert [(e.role, e.body) for e in silent.events()] == [("user", "Find the error types.\n")]
    sent = messages.to_messages(silent.events())
    assert sent == [
        {"role": "user", "content": [{"type": "text", "text": "Find the error types.\n"}]}
    ]
    assert tree.state_of(silent) is State.RUNNING  # the model's turn, as in the source

    turn = conv.events()[1]  # now the turn says something before its tool call
    turn.path.write_text(frontmatter.render(turn.meta, "Grepping.\n"), encoding="utf-8")
    said = Conversation(conv.root, cli("conversation", "fork", "busy", "--last=1").stdout.strip())
    (turn,) = said.events()
    assert turn.role == "assistant" and turn.body.strip() == "Grepping." and not turn.tool_calls
    assert "(no reply)" not in json.dumps(messages.to_messages(said.events()))


def test_non_interactive_runs_print_questions_and_exit_4(
    main_ws: Path, api_env: Any, cli: Cli
) -> None:
    """`--non-interactive` (RFD 049): a sub-agent run never prompts; a sub-agent that must
    ask first prints its questions on stdout and the command exits with status 4."""
    from tests.seeds.test_onboarding_protocol import REVIEWER, reviewer

    write_profile(main_ws, "code_reviewer", REVIEWER)
    api_env.responder = reviewer
    asked = cli("query", "--new", "--agent", "code_reviewer", "--root-id=main", "--no-activate",
                "--non-interactive", "Review PR #123 for security")  # fmt: skip
    assert asked.code == 4
    (sub,) = tree.walk(open_workspace(main_ws).conv_root, "main")
    assert asked.stdout == (
        f'<questions conversation_id="{sub}">\n1. What languages?\n'
        "2. Any known vulnerabilities to focus on?\n</questions>\n"
    )
