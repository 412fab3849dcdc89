"""Fixtures of the seed tests: RFD 051's profiles in jpfs's format, the real SDK."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import write_profile

# RFD 051, "Researcher profile" (jp_agent_researcher.toml), in jpfs's profile format:
# the same model, system prompt and read-only tools; no jp_query (no recursion).
RESEARCHER = '''
model = "claude-sonnet-4-20250514"
provider = "anthropic"
description = "Investigates the codebase and summarises what it finds (read-only)."
overridable = ["model"]

[system]
role = """
You are a research assistant. Your job is to investigate codebases, find
relevant code, and produce clear, concise summaries. Focus on facts: what
exists, where it is, how it's structured, and how it's used.

Do not write or modify code. Do not suggest changes. Report what you find.
"""

# Enable only read-only tools.
[tools]
allow = ["fs_read_file", "fs_grep_files", "fs_list_files"]
'''

# RFD 051, "Planner profile" (jp_agent_planner.toml).
PLANNER = '''
model = "claude-sonnet-4-20250514"
provider = "anthropic"
description = "Turns research summaries and a goal into a step-by-step plan (read-only)."

[system]
role = """
You are a planning assistant. Given research summaries and a goal, produce a
step-by-step implementation plan. For each step, specify:
- Which file(s) to change
- What the change is
- Why the change is needed
- Any ordering dependencies between steps

Be specific enough that another developer could execute the plan without
additional research.
"""

[tools]
allow = ["fs_read_file", "fs_grep_files", "fs_list_files"]
'''

# RFD 051's main agent ("running Opus"), with the four tools of "What we're building"
# and the `config` enum of jp_query.toml (jpfs: the profiles it may start).
MAIN = """
model = "claude-opus-4-20250514"
provider = "anthropic"
description = "The main agent: orchestrates research and planning sub-agents."

[system]
role = "You are the MAIN agent. Delegate research with jp_query."

[tools]
allow = ["jp_query", "jp_conversation_list", "jp_conversation_print", "jp_conversation_grep"]
agents = ["researcher", "planner"]
"""

RESEARCHER_PROMPT = "You are a research assistant."
PLANNER_PROMPT = "You are a planning assistant."
MAIN_PROMPT = "You are the MAIN agent."


@pytest.fixture
def rfd_ws(ws: Path, api_env) -> Path:  # type: ignore[no-untyped-def]
    """A workspace with RFD 051's profiles; models answer from ``api_env``."""
    write_profile(ws, "researcher", RESEARCHER)
    write_profile(ws, "planner", PLANNER)
    write_profile(ws, "main", MAIN, allowed=True)
    return ws
