"""Secrets never enter the record (issue #28): ignored and secret files are not read,
known formats are redacted before anything is sent or recorded, and a push holding one
is refused. The real runtime, SDK, git and remote; the model is the local server."""

from __future__ import annotations

import json
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jpfs.core import secrets
from jpfs.core.tool import ToolContext, check_arguments
from jpfs.errors import ScopeError
from jpfs.tools.fs import FS_TOOLS
from tests.conftest import Result, git, rgit, write_profile
from tests.messages_server import MessagesServer, Router, text_reply, tool_results, tool_use_reply

ROOT = Path(__file__).resolve().parents[2]
# Fake keys in the published formats, built here so that this file holds none verbatim.
ANTHROPIC = "sk-ant-api03-" + "Zq8x" * 23 + "-AAAA"
GITHUB = "ghp_" + "a1B2c3D4e5" * 3 + "F6g7H8"
AWS_ID = "AKIA" + "J7QWERTYUI2ASDFG"
DOTENV_TOKEN = "tok-7f3e9a1c4b2d8e6f0a5c3b9d7e1f4a2c"  # no known format: only ignoring guards it

READER = """
model = "claude-test"
provider = "anthropic"
[system]
role = "You are READER."
[tools]
allow = ["fs_read_file", "fs_list_files", "fs_grep_files", "mail_send"]
"""


# -- the detector -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (ANTHROPIC, "anthropic-key"),
        ("sk-proj-" + "Ab9_" * 12, "openai-key"),
        ("sk-" + "A1b2" * 5 + "T3BlbkFJ" + "c3D4" * 5, "openai-key"),
        (AWS_ID, "aws-access-key"),
        ("aws_secret_access_key = " + "wJalrXUtnFEMIK7MDENGbPxRfiCY" + "EXAMPLEKEY12", "aws-secret-key"),
        (GITHUB, "github-token"),
        ("github_pat_" + "11ABCDEFG0" * 5, "github-token"),
        ("glpat-" + "x1Y2z3W4v5U6t7S8r9Q0", "gitlab-token"),
        ("xoxb-" + "1234567890-abcdefghijkl", "slack-token"),
        ("https://hooks.slack.com/services/T0001/B0002/" + "abc123XYZ", "slack-token"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk=\n-----END OPENSSH PRIVATE KEY-----",
         "private-key"),
    ],
)  # fmt: skip
def test_each_format_is_redacted_and_counted(text: str, kind: str) -> None:
    clean, counts = secrets.redact(f"before {text} after")
    assert counts == {kind: 1}
    assert f"[redacted:{kind}]" in clean and clean.startswith("before ") and "after" in clean
    assert [f.kind for f in secrets.scan(f"x\ny {text}")] == [kind]


def test_the_name_of_a_setting_stays_and_its_value_goes() -> None:
    line = 'AWS_SECRET_ACCESS_KEY="' + "wJalrXUtnFEMIK7MDENGbPxRfiCY" + 'EXAMPLEKEY12"'
    assert secrets.redact(line)[0] == 'AWS_SECRET_ACCESS_KEY="[redacted:aws-secret-key]"'


def test_provider_keys_from_the_environment_are_redacted_whatever_their_format() -> None:
    key = "plain-looking-but-the-key-0123456789"
    clean, counts = secrets.redact(f"a {key} b", {"ANTHROPIC_API_KEY": key})
    assert clean == "a [redacted:provider-key] b" and counts == {"provider-key": 1}
    assert secrets.redact("a x b", {"ANTHROPIC_API_KEY": "x"})[0] == "a x b"  # too short


def test_no_false_positive_on_ordinary_code() -> None:
    """jpfs's own sources, docs, benches and templates: thousands of lines of code that
    talk about keys, tokens and PEM markers, and hold none."""
    scanned = 0
    for top in ("jpfs", "bench", "protocol", "templates", "README.md", "tests/docs"):
        path = ROOT / top
        for file in [path] if path.is_file() else sorted(path.rglob("*")):
            if file.suffix not in (".py", ".md", ".toml", ".json") or not file.is_file():
                continue
            text = file.read_text(encoding="utf-8")
            assert not list(secrets.scan(text)), file
            scanned += 1
    assert scanned > 150


@pytest.mark.parametrize(
    ("path", "secret"),
    [
        (".env", True), ("config/.env.production", True), ("deploy/prod.env", True),
        ("certs/server.pem", True), ("tls/server.key", True), ("home/.ssh/id_ed25519", True),
        (".npmrc", True), (".aws/credentials", True), ("Credentials.json", True),
        ("src/id_utils.py", False), ("keys.py", False), ("src/environment.py", False),
        ("docs/credentials_guide.md", False), ("key.txt", False),
    ],
)  # fmt: skip
def test_well_known_secret_file_names(path: str, secret: bool) -> None:
    assert secrets.secret_name(path) is secret


# -- the file tools ------------------------------------------------------------------------


def project(repo: Path) -> None:
    (repo / ".gitignore").write_text(".env\nbuild/\n", encoding="utf-8")
    (repo / ".env").write_text(f"API_TOKEN={DOTENV_TOKEN}\n", encoding="utf-8")
    (repo / "build").mkdir()
    (repo / "build" / "out.txt").write_text(f"cached {DOTENV_TOKEN}\n", encoding="utf-8")
    (repo / "id_rsa").write_text("not really a key, but its name says so\n", encoding="utf-8")
    (repo / "settings.py").write_text(
        f'ANTHROPIC = "{ANTHROPIC}"\nGITHUB = "{GITHUB}"\nDEBUG = True\n', encoding="utf-8"
    )
    git(repo, "add", ".gitignore", "id_rsa", "settings.py")
    git(repo, "commit", "-q", "-m", "project files")


def ctx(root: Path, expose: list[str] | None = None) -> ToolContext:
    config = {"tools": {"expose": expose or []}}
    return ToolContext(root, "", root, config=config)


def call(c: ToolContext, name: str, **args: Any) -> str:
    tool = FS_TOOLS[name]
    return tool.run(c, check_arguments(tool, args))


def test_ignored_and_secret_files_are_not_read_listed_or_searched(repo: Path) -> None:
    project(repo)
    c = ctx(repo)
    for path, why in (
        (".env", "is a well-known secret file"),
        ("build/out.txt", "is ignored by git"),
        ("id_rsa", "is a well-known secret file"),
    ):
        with pytest.raises(ScopeError, match="agents do not read it") as refused:
            call(c, "fs_read_file", path=path)
        assert why in str(refused.value) and "tools.expose" in str(refused.value)
    listed = call(c, "fs_list_files", path=".", recursive=True)
    assert ".env" not in listed and "build" not in listed and "id_rsa" not in listed
    assert "settings.py" in listed and ".gitignore" in listed
    assert call(c, "fs_grep_files", pattern=DOTENV_TOKEN).startswith("no matches")
    assert "settings.py:3: DEBUG = True" in call(c, "fs_grep_files", pattern="DEBUG")
    # A profile may expose named paths; the rest stays hidden.
    exposed = ctx(repo, [".env"])
    assert DOTENV_TOKEN in call(exposed, "fs_read_file", path=".env")
    with pytest.raises(ScopeError):
        call(exposed, "fs_read_file", path="build/out.txt")


def test_a_snapshot_may_not_expose_more_than_its_profile(
    ws: Path, cli: Callable[..., Result], api_env: MessagesServer
) -> None:
    write_profile(ws, "reader", READER, allowed=True)
    assert cli("conversation", "new", "r1", "--agent", "reader").code == 0
    toml = ws / "conversations" / "r1" / "conversation.toml"
    text = toml.read_text(encoding="utf-8").replace("expose = []", 'expose = [".env"]')
    toml.write_text(text, encoding="utf-8")
    (ws / "conversations" / "r1" / "task.md").write_text("Read .env\n", encoding="utf-8")
    result = cli("query", "--id", "r1", "")
    assert result.code == 1 and "tools.expose ['.env']" in result.stderr
    assert api_env.requests == []


# -- end to end: nothing reaches the provider or the record ----------------------------


def history(repo: Path) -> str:
    """The record's whole history: every commit's message and diff (the project's own
    branch holds settings.py, as the user committed it)."""
    return subprocess.run(
        ["git", "log", "jpfs-record", "-p", "--format=%B"], cwd=repo, capture_output=True,
        text=True, check=True,
    ).stdout  # fmt: skip


def everything_written(repo: Path) -> str:
    out = []
    for path in (repo / "conversations").rglob("*"):
        if path.is_file() and ".git" not in path.parts:
            out.append(path.read_text(encoding="utf-8", errors="replace"))
    return "\n".join(out)


def test_an_agent_reads_neither_dotenv_nor_tracked_keys_into_the_record(
    ws: Path,
    api_env: MessagesServer,
    cli: Callable[..., Result],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    provider_key = "a-provider-key-that-is-long-enough-0042"
    monkeypatch.setenv("ANTHROPIC_API_KEY", provider_key)
    project(ws)
    (ws / "notes.md").write_text(f"the key is {provider_key}\n", encoding="utf-8")
    git(ws, "add", "notes.md")
    git(ws, "commit", "-q", "-m", "notes")
    write_profile(ws, "reader", READER, allowed=True)
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "reader")

    def answer(request: dict[str, Any]) -> Any:
        done = len(tool_results(request))
        if done == 0:
            return tool_use_reply(
                ("fs_read_file", {"path": ".env"}),
                ("fs_read_file", {"path": "settings.py"}),
                ("fs_read_file", {"path": "notes.md"}),
            )
        # The model repeats what it saw: the markers, never the keys.
        seen = " ".join(str(r["content"]) for r in tool_results(request))
        return text_reply(f"Here is what I found: {seen}")

    api_env.responder = answer
    result = cli("query", "--agent", "reader", "What is in .env and settings.py?")
    assert result.code == 0, result.stderr
    conv = next(p.name for p in (ws / "conversations").iterdir() if p.name.startswith("c-"))
    events = sorted((ws / "conversations" / conv / "events").iterdir())
    tools = [e.read_text(encoding="utf-8") for e in events if e.name.endswith("-tool.md")]
    refused = next(t for t in tools if ".env" in t and "is_error = true" in t)
    assert "is a well-known secret file; agents do not read it" in refused
    settings = next(t for t in tools if "DEBUG = True" in t)
    assert "[redacted:anthropic-key]" in settings and "[redacted:github-token]" in settings
    meta = tomllib.loads(settings.split("+++")[1])
    assert meta["redacted"] == {"anthropic-key": 1, "github-token": 1}
    notes = next(t for t in tools if "the key is" in t)
    assert "[redacted:provider-key]" in notes
    # Nowhere: not in a request body, not in the record's history, not in its files.
    for secret in (DOTENV_TOKEN, ANTHROPIC, GITHUB, provider_key):
        assert all(secret not in r.raw.decode() for r in api_env.requests), secret
        assert secret not in history(ws / "conversations"), secret
        assert secret not in everything_written(ws), secret
    # What the model got back instead: the markers.
    assert "[redacted:anthropic-key]" in json.dumps(tool_results(api_env.bodies[-1]))


def test_mail_answers_and_a_pasted_task_are_redacted(
    ws: Path, api_env: MessagesServer, cli: Callable[..., Result]
) -> None:
    onboarding = READER + "\n[onboarding]\nenabled = true\n"
    write_profile(ws, "reader", onboarding, allowed=True)
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "reader")
    api_env.responder = (
        Router()
        .when(lambda r: any(t["name"] == "ask_caller" for t in r.get("tools", [])),
              tool_use_reply(("ask_caller", {"questions": ["Which token?"]})),
              tool_use_reply(("start_work", {})))
        .when(lambda r: True, text_reply("done"))
    )  # fmt: skip
    asked = cli("query", "--agent", "reader", "--non-interactive", f"Use {GITHUB} to fetch")
    assert asked.code == 4, asked.stderr
    conv = next(p.name for p in (ws / "conversations").iterdir() if p.name.startswith("c-"))
    # jpfs wrote the task from the query: redacted there, so in what is sent too.
    task = (ws / "conversations" / conv / "task.md").read_text(encoding="utf-8")
    assert GITHUB not in task and "[redacted:github-token]" in task
    assert GITHUB not in json.dumps(api_env.bodies[0])
    assert cli("answer", conv, f"this one: {AWS_ID}", "--run").code == 0
    answers = (ws / "conversations" / conv / "answers.md").read_text(encoding="utf-8")
    assert AWS_ID not in answers and "[redacted:aws-access-key]" in answers
    assert all(AWS_ID not in r.raw.decode() and GITHUB not in r.raw.decode()
               for r in api_env.requests)  # fmt: skip
    sent = cli("mail", "send", conv, "--no-start", "-s", f"key {ANTHROPIC}", f"body {GITHUB}")
    assert sent.code == 0, sent.stderr
    (message,) = [p for p in (ws / "conversations" / conv / "inbox").iterdir()]
    text = message.read_text(encoding="utf-8")
    assert ANTHROPIC not in text and GITHUB not in text
    meta = tomllib.loads(text.split("+++")[1])
    assert meta["redacted"] == {"anthropic-key": 1, "github-token": 1}


# -- sharing -------------------------------------------------------------------------------


def test_a_push_holding_a_secret_is_refused_and_scan_reports_it(
    tmp_path: Path, ws: Path, cli: Callable[..., Result]
) -> None:
    from tests.conftest import share_record

    remote = tmp_path / "remote.git"
    share_record(tmp_path, ws, cli)
    assert cli("scan").code == 0
    (ws / "conversations" / "leaky").mkdir()
    task = ws / "conversations" / "leaky" / "task.md"
    task.write_text(f"Deploy with\n{GITHUB}\n", encoding="utf-8")
    refused = cli("sync")
    assert refused.code == 1, refused.stderr
    assert "not pushing the record" in refused.stderr and "leaky" in refused.stderr
    assert "leaky/task.md:2: github-token" in refused.stderr
    on_remote = git(remote.parent, "--git-dir", str(remote), "log", "-p", "jpfs-record")
    assert GITHUB not in on_remote
    scanned = cli("scan", "--format", "json")
    assert scanned.code == 1
    (found,) = json.loads(scanned.stdout)
    assert (found["conversation"], found["path"], found["line"], found["kind"]) == (
        "leaky", "leaky/task.md", 2, "github-token",
    )  # fmt: skip
    assert "git filter-repo" in cli("scan").stderr
    # Not a secret after all (say): pushed once with the check off.
    forced = cli("--cfg", "sync.scan=false", "sync")
    assert forced.code == 0, forced.stderr
    assert GITHUB in git(remote.parent, "--git-dir", str(remote), "log", "-p", "jpfs-record")
    assert rgit(ws, "status", "--porcelain") == ""
