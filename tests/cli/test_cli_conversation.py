"""The conversation commands through the CLI on real repositories."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from jpfs.core import record
from jpfs.core.workspace import open_workspace
from tests.conftest import git, grep_brief, jpfs_subprocess, rgit
from tests.infra.git.test_untracked import settled

CONV = "conversations"


def trailers(repo: Path, rev: str = "HEAD") -> dict[str, str]:
    """The trailers of a commit on the record (``conversations/``, branch jpfs-record)."""
    msg = rgit(repo, "log", "-1", "--format=%B", rev)
    parsed = subprocess.run(
        ["git", "interpret-trailers", "--parse"], input=msg, capture_output=True, text=True,
        check=True,
    ).stdout  # fmt: skip
    return dict(line.split(": ", 1) for line in parsed.splitlines())


# What `jpfs init` leaves in the user's work tree for the user to commit; nothing else.
PROJECT_FILES = "?? .gitignore\n?? .jpfs/\n"


def assert_user_branch_untouched(repo: Path) -> None:
    """jpfs never commits on the user's branch nor stages anything in the user's index."""
    assert git(repo, "log", "--format=%s", "HEAD") == "initial\n"
    assert git(repo, "status", "--porcelain") == PROJECT_FILES


def test_init_writes_files_starts_the_record_and_commits_nothing_of_the_users(
    repo: Path, cli
) -> None:
    head = git(repo, "rev-parse", "HEAD")
    result = cli("init")
    assert result.code == 0, result.stderr
    assert (repo / ".jpfs/config.toml").is_file()
    assert (repo / ".jpfs/agents/default.toml").is_file()
    assert "/.jpfs/local/" in (repo / ".gitignore").read_text()
    assert (repo / CONV).is_dir()
    assert "/conversations/" in (repo / ".gitignore").read_text().splitlines()
    # The user's branch did not move; the new files are left for the user to commit.
    assert git(repo, "rev-parse", "HEAD") == head
    assert git(repo, "status", "--porcelain") == PROJECT_FILES
    assert git(repo, "ls-files") == "README.md\n"
    # The record: conversations/ is a worktree of jpfs-record, started by one root commit.
    assert rgit(repo, "symbolic-ref", "--short", "HEAD") == "jpfs-record\n"
    assert rgit(repo, "log", "--format=%s") == "jpfs: start the record\n"
    assert rgit(repo, "rev-list", "--parents", "HEAD").split() == [
        rgit(repo, "rev-parse", "HEAD").strip()
    ]
    assert rgit(repo, "ls-tree", "--name-only", "HEAD").split() == [".gitignore", "README.md"]
    assert trailers(repo)["Jpfs-Event"] == "init"
    assert rgit(repo, "status", "--porcelain") == ""
    record_head = rgit(repo, "rev-parse", "HEAD")
    assert cli("init").code == 0
    assert rgit(repo, "rev-parse", "HEAD") == record_head
    assert git(repo, "rev-parse", "HEAD") == head
    assert git(repo, "status", "--porcelain") == PROJECT_FILES


def test_init_outside_a_repo_needs_git_init(tmp_path: Path, cli) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    result = cli("init", cwd=plain)
    assert result.code == 1
    assert "not inside a git repository" in result.stderr and "--git-init" in result.stderr
    assert not (plain / ".jpfs").exists()
    assert cli("init", "--git-init", cwd=plain).code == 0
    assert (plain / ".git").is_dir() and (plain / ".jpfs/config.toml").is_file()


def test_new_prints_only_the_id_and_commits_with_trailers(ws: Path, cli) -> None:
    result = cli("conversation", "new", "refactor", "--title", "Refactor it")
    assert result.code == 0, result.stderr
    assert result.stdout == "refactor\n"
    meta = (ws / CONV / "refactor/conversation.toml").read_text()
    assert 'title = "Refactor it"' in meta and 'agent = "default"' in meta
    assert 'status = "active"' in meta and "base = " in meta
    assert rgit(ws, "log", "-1", "--format=%s") == "jpfs(refactor): new\n"
    t = trailers(ws)
    assert t["Jpfs-Conversation"] == "refactor" and t["Jpfs-Event"] == "new"
    assert t["Jpfs-Agent"] == "default"
    assert rgit(ws, "status", "--porcelain") == ""
    assert_user_branch_untouched(ws)
    assert cli("conversation", "show").stdout == "refactor\n"
    child = cli("c", "new", "--parent", "refactor", "--no-activate").stdout.strip()
    assert child.startswith("refactor/c-")
    assert cli("conversation", "show").stdout == "refactor\n"
    dup = cli("conversation", "new", "refactor")
    assert dup.code == 1 and "already exists" in dup.stderr


def test_ls_json_has_stable_keys_and_filters(ws: Path, cli) -> None:
    cli("c", "new", "a")
    cli("c", "new", "b", "--hidden")
    cli("c", "new", "x", "--parent", "a")
    (ws / CONV / "human").mkdir()
    (ws / CONV / "human/task.md").write_text("made by hand\n")
    rows = json.loads(cli("c", "ls", "--format", "json").stdout)
    assert [r["id"] for r in rows] == ["a", "a/x", "human"]
    assert set(rows[0]) == {
        "id", "parent", "title", "agent", "status", "events_count", "created", "updated", "hidden",
    }  # fmt: skip
    assert rows[1]["parent"] == "a"
    assert rows[2]["status"] == "running"  # a task with no onboarding profile: the agent acts
    every = json.loads(cli("c", "ls", "--hidden", "--format", "json").stdout)
    assert "b" in [r["id"] for r in every]
    below = json.loads(cli("c", "ls", "--root", "a", "--format", "json").stdout)
    assert [r["id"] for r in below] == ["a/x"]
    text = cli("c", "ls", "--tree").stdout
    assert text.splitlines()[0].split() == ["ID", "STATE", "AGENT", "EVENTS", "TITLE"]
    assert "\n  x  " in text


def test_print_and_grep(ws: Path, cli) -> None:
    from jpfs.core.conversation import Conversation

    cli("c", "new", "a")
    conv = Conversation(ws / CONV, "a")
    conv.append_event("user", "Find the Needle please\n")
    conv.append_event("assistant", "found: needle in line 3\n", {"model": "m"})
    record.commit(open_workspace(ws), "a", "assistant")
    md = cli("c", "print", "a").stdout
    assert "Find the Needle please" in md and "0002 · assistant" in md
    data = json.loads(cli("c", "print", "a", "--format", "json", "--last", "1").stdout)
    assert [e["seq"] for e in data["events"]] == [2]

    hit = cli("c", "grep", "needle")
    assert hit.code == 0
    assert grep_brief(hit.stdout) == ["a: found: needle in line 3"]
    assert hit.stdout.startswith("a:events/0002-assistant.md:")
    assert len(grep_brief(cli("c", "grep", "-i", "needle").stdout)) == 2
    assert cli("c", "grep", "absent-word").code == 1
    bad = cli("c", "grep", "--regex", "(")
    assert bad.code == 2 and "bad regular expression" in bad.stderr
    rx = json.loads(cli("c", "grep", "--regex", "line [0-9]", "--format", "json").stdout)
    assert rx == [{"id": "a", "file": "events/0002-assistant.md", "line": rx[0]["line"],
                   "text": "found: needle in line 3"}]  # fmt: skip


def test_a_bad_pattern_git_refuses_is_worded_alike_in_any_locale(
    ws: Path, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Python's re takes 300 nested groups; PCRE2 (git grep -P) refuses them, in a
    # message jpfs reads for the word "parentheses", and git tags with "fatal:" in the
    # user's language unless jpfs asks for English.
    pattern = "(" * 300 + "x" + ")" * 300
    cli("c", "new", "a")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    monkeypatch.delenv("LANGUAGE", raising=False)
    english = cli("c", "grep", "--regex", pattern)
    assert english.code == 2 and "bad pattern" in english.stderr
    assert "fatal" not in english.stderr and "too deeply nested" in english.stderr
    monkeypatch.setenv("LANGUAGE", "de")
    spoken = subprocess.run(
        ["git", "rev-parse", "--verify", "no-such-ref"], cwd=ws, capture_output=True, text=True
    )
    if spoken.stderr.startswith("fatal:"):
        pytest.skip("this git has no German messages, so the locale cannot show")
    assert cli("c", "grep", "--regex", pattern) == english


def test_a_regex_search_reads_text_in_the_users_character_set(
    ws: Path, cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    # git grep -P matches characters, not bytes, only in a UTF-8 locale: the English
    # messages jpfs asks of git must not cost the user's character set.
    from jpfs.core.conversation import Conversation

    cli("c", "new", "a")
    Conversation(ws / CONV, "a").append_event("user", "a naïve plan\n")
    record.commit(open_workspace(ws), "a", "input")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    assert grep_brief(cli("c", "grep", "--regex", "na.ve").stdout) == ["a: a naïve plan"]


def test_grep_scopes_and_hidden(ws: Path, cli) -> None:
    from jpfs.core.conversation import Conversation

    cli("c", "new", "a")
    cli("c", "new", "x", "--parent", "a")
    cli("c", "new", "h", "--parent", "a", "--hidden")
    for cid in ("a", "a/x", "a/h"):
        Conversation(ws / CONV, cid).append_event("user", f"token in {cid}\n")
    record.commit(open_workspace(ws), "a", "input")
    assert grep_brief(cli("c", "grep", "token").stdout) == ["a: token in a", "a/x: token in a/x"]
    assert grep_brief(cli("c", "grep", "token", "--root", "a").stdout) == ["a/x: token in a/x"]
    assert grep_brief(cli("c", "grep", "token", "--id", "a").stdout) == ["a: token in a"]
    assert "a/h: token in a/h" in grep_brief(cli("c", "grep", "token", "--hidden").stdout)


def test_grep_finds_files_not_committed_yet(ws: Path, cli) -> None:
    cli("c", "new", "a")
    cli("c", "new", "x", "--parent", "a")
    # Written by hand with no daemon running: on disk, in no commit.
    (ws / CONV / "a" / "files").mkdir()
    (ws / CONV / "a" / "files" / "notes.md").write_text("a fresh needle\n", encoding="utf-8")
    (ws / CONV / "a" / "x" / "task.md").write_text("another needle\n", encoding="utf-8")
    untracked = ["git", "ls-files", "-o", "--exclude-standard"]
    import subprocess

    listed = subprocess.run(untracked, cwd=ws / CONV, capture_output=True, text=True, check=True)
    assert "a/files/notes.md" in listed.stdout  # really not committed
    hits = json.loads(cli("c", "grep", "needle", "--format", "json").stdout)
    assert {(h["id"], h["file"]) for h in hits} == {("a", "files/notes.md"), ("a/x", "task.md")}
    assert cli("c", "grep", "needle", "--id", "a").stdout == "a:files/notes.md:1: a fresh needle\n"
    assert cli("c", "grep", "needle", "--root", "a").stdout == "a/x:task.md:1: another needle\n"
    assert cli("c", "grep", "-i", "--regex", "FRESH n[e]+dle").code == 0


def test_grep_keeps_up_with_the_files_and_with_git_run_by_hand(ws: Path, cli) -> None:
    """The scan for files not committed keeps a cache (.jpfs/local/untracked.bin); what
    it says must follow every change, including an index rewritten by git by hand."""
    cli("c", "new", "a")
    (ws / CONV / "a" / "task.md").write_text("the needle, committed\n", encoding="utf-8")
    rgit(ws, "add", "a/task.md")
    rgit(ws, "commit", "-q", "-m", "by hand")
    cli("c", "new", "b")  # the committer writes the index last, as when jpfs runs
    assert grep_brief(cli("c", "grep", "needle").stdout) == ["a: the needle, committed"]
    assert (ws / ".jpfs" / "local" / "untracked.bin").is_file()
    (ws / CONV / "b" / "notes.md").write_text("a new needle\n", encoding="utf-8")
    assert grep_brief(cli("c", "grep", "needle").stdout) == [
        "a: the needle, committed",
        "b: a new needle",
    ]
    settled(ws / CONV)  # the cache now trusts every directory's stamp
    assert len(cli("c", "grep", "needle").stdout.splitlines()) == 2
    # Out of the index, still on disk: no directory moved, yet it is found.
    rgit(ws, "rm", "-q", "--cached", "a/task.md")
    assert "a: the needle, committed" in grep_brief(cli("c", "grep", "needle").stdout)
    (ws / CONV / "b" / "notes.md").unlink()
    assert grep_brief(cli("c", "grep", "needle").stdout) == ["a: the needle, committed"]


def test_fork_copies_last_events(ws: Path, cli) -> None:
    from jpfs.core.conversation import Conversation

    cli("c", "new", "a", "--agent", "researcher")
    conv = Conversation(ws / CONV, "a")
    for i in range(4):
        conv.append_event("user" if i % 2 == 0 else "assistant", f"event {i}\n")
    child = cli("c", "fork", "a", "--last", "2").stdout.strip()
    assert child.startswith("a/c-")
    copied = Conversation(ws / CONV, child)
    assert [e.body for e in copied.events()] == ["event 2\n", "event 3\n"]
    # It ends on the source's final reply: as finished as the source, that reply its result.
    shown = {r["id"]: r for r in json.loads(cli("tree", "--format", "json").stdout)}
    assert shown[child]["state"] == "idle"
    assert copied.read("result.md").endswith("event 3\n")
    assert f"{child}/result.md" in rgit(ws, "show", "--name-only", "--format=", "HEAD")
    meta = copied.meta()
    assert meta["forked_from"] == "a@4" and meta["agent"] == "researcher"
    assert meta["config"] == conv.meta()["config"]
    blank = cli("c", "fork", "a", "--last", "0").stdout.strip()
    assert Conversation(ws / CONV, blank).events() == []
    assert trailers(ws)["Jpfs-Event"] == "fork"
    assert trailers(ws)["Jpfs-Conversation"] == blank
    assert_user_branch_untouched(ws)


def test_rm_refuses_children_without_cascade(ws: Path, cli) -> None:
    cli("c", "new", "a")
    cli("c", "new", "x", "--parent", "a")
    refused = cli("c", "rm", "a")
    assert refused.code == 1 and "--cascade" in refused.stderr
    assert (ws / CONV / "a/x").is_dir()
    assert cli("c", "rm", "a", "--cascade").code == 0
    assert not (ws / CONV / "a").exists()
    assert rgit(ws, "status", "--porcelain") == ""
    assert "a/conversation.toml" in rgit(ws, "log", "--name-only", "--format=", "-1")
    assert not (ws / CONV / "a").exists() and rgit(ws, "ls-files", "a") == ""
    assert_user_branch_untouched(ws)


def test_root_id_refuses_everything_outside(ws: Path, cli, tmp_path: Path) -> None:
    cli("c", "new", "r")
    cli("c", "new", "in", "--parent", "r")
    cli("c", "new", "rx")
    outside = tmp_path / "outside"
    (outside / "evil").mkdir(parents=True)
    (outside / "evil/task.md").write_text("secret\n")
    os.symlink(outside / "evil", ws / CONV / "r" / "link")
    assert cli("c", "print", "r/in", "--root-id", "r").code == 0
    for bad in ["r", "rx", "../r", "/etc", "r/../rx", "r/link", "r/missing", "R/in"]:
        result = cli("c", "print", bad, "--root-id", "r")
        assert result.code == 1, bad
        assert result.stdout == ""
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert cli("c", "grep", "x", "--id", "rx", "--root-id", "r").code == 1
    assert cli("c", "fork", "rx", "--root-id", "r").code == 1
    assert cli("c", "rm", "rx", "--root-id", "r").code == 1
    assert (ws / CONV / "rx").is_dir()


def test_every_command_reads_root_id_alike(ws: Path, cli) -> None:
    # One resolver (jpfs.cli.options): an empty --root-id is an id to check, and so
    # refused, by blame as by the rest (blame once took it for no --root-id at all).
    cli("c", "new", "a")
    for args in (
        ("tree",), ("cost",), ("log",), ("c", "ls"), ("c", "print", "a"),
        ("mail", "check", "a"), ("kill", "a"), ("answer", "a", "x"),
        ("blame", "README.md"),
    ):  # fmt: skip
        result = cli(*args, "--root-id", "")
        assert result.code == 1, args
        assert "conversation id must not be empty" in result.stderr, args
    assert cli("blame", "README.md", "--root-id", "a").code == 0


def test_use_show_and_gc(ws: Path, cli) -> None:
    cli("c", "new", "keep", "--tmp", "1h")
    cli("c", "new", "old", "--tmp", "1h", "--no-activate")
    for cid in ("keep", "old"):
        path = ws / CONV / cid / "conversation.toml"
        text = path.read_text()
        lines = [ln if not ln.startswith("expires") else "expires = 2000-01-01T00:00:00Z"
                 for ln in text.splitlines()]  # fmt: skip
        path.write_text("\n".join(lines) + "\n")
    assert cli("c", "show").stdout == "keep\n"
    result = cli("gc")
    assert result.stdout == "removed old\n"
    assert "kept keep" in result.stderr
    assert (ws / CONV / "keep").is_dir() and not (ws / CONV / "old").exists()
    cli("c", "use", "keep")
    shown = json.loads(cli("c", "show", "keep", "--format", "json").stdout)
    assert shown["id"] == "keep"
    assert "id: keep\n" in cli("c", "show", "keep").stdout


def test_conversation_toml_comments_survive_rewrites(ws: Path, cli) -> None:
    from jpfs.core.conversation import Conversation

    cli("c", "new", "a")
    path = ws / CONV / "a/conversation.toml"
    path.write_text(
        "# my note\n" + path.read_text().replace("hidden = false", "hidden = false # mine")
    )
    Conversation(ws / CONV, "a").update(status="killed")
    text = path.read_text()
    assert text.startswith("# my note\n") and "hidden = false # mine" in text
    assert 'status = "killed"' in text


def test_log_lists_events_of_a_subtree(ws: Path, cli) -> None:
    cli("c", "new", "a")
    cli("c", "new", "x", "--parent", "a")
    cli("c", "new", "b")
    lines = cli("log", "a").stdout.splitlines()
    assert lines[0].split() == ["TIME", "CONVERSATION", "EVENT", "AGENT", "AUTHOR", "NOTE"]
    assert len(lines) == 3
    assert lines[1].split()[2:4] == ["a/x", "new"] and lines[2].split()[2:4] == ["a", "new"]
    data = json.loads(cli("log", "--format", "json").stdout)
    assert [e["conversation"] for e in data][:3] == ["b", "a/x", "a"]


def test_config_commands(ws: Path, cli) -> None:
    assert cli("config", "get", "daemon.max_agents").stdout == "4\n"
    assert cli("config", "set", "daemon.max_agents", "7").code == 0
    assert cli("config", "get", "daemon.max_agents").stdout == "7\n"
    assert "# Agents running at once" in (ws / ".jpfs/config.toml").read_text()
    # A project file: written for the user to commit, never committed by jpfs.
    assert_user_branch_untouched(ws)
    assert "jpfs: config" not in rgit(ws, "log", "--format=%s")  # nor on the record
    assert cli("--cfg", "daemon.max_agents=2", "config", "get", "daemon.max_agents").stdout == "2\n"
    shown = json.loads(cli("config", "show", "--format", "json").stdout)
    row = next(r for r in shown if r["key"] == "daemon.max_agents")
    assert row["value"] == 7 and row["source"].endswith("config.toml")
    bad = cli("config", "set", "daemon.nope", "1")
    assert bad.code == 1 and "unknown key" in bad.stderr


def test_workspace_flag_and_errors(ws: Path, cli, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert cli("-w", str(ws), "c", "new", "a", cwd=elsewhere).stdout == "a\n"
    missing = cli("c", "ls", cwd=elsewhere)
    assert missing.code == 1 and "no jpfs workspace" in missing.stderr
    sub = ws / "src" / "deep"
    sub.mkdir(parents=True)
    assert cli("c", "ls", cwd=sub).stdout.splitlines()[1].startswith("a  ")


def test_console_entry_point_in_a_subprocess(ws: Path) -> None:
    proc = jpfs_subprocess("conversation", "new", "sub", cwd=ws)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "sub\n"
    proc = jpfs_subprocess("conversation", "print", "nope", cwd=ws)
    assert proc.returncode == 1 and proc.stderr.startswith("jpfs: error: ")
    proc = jpfs_subprocess("conversation", "frobnicate", cwd=ws)
    assert proc.returncode == 2


@pytest.mark.parametrize("n_procs", [6])
def test_concurrent_processes_create_and_commit(ws: Path, n_procs: int) -> None:
    import sys

    script = (
        "import sys\nfrom jpfs.cli.main import main\n"
        "for i in range(8):\n"
        "    assert main(['c','new',f'p{sys.argv[1]}-{i}','--no-activate']) == 0\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(n)], cwd=ws) for n in range(n_procs)
    ]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    subjects = rgit(ws, "log", "--format=%s").splitlines()
    made = [s for s in subjects if s.startswith("jpfs(p")]
    assert sorted(made) == sorted(f"jpfs(p{n}-{i}): new" for n in range(n_procs) for i in range(8))
    assert rgit(ws, "status", "--porcelain") == ""
    assert_user_branch_untouched(ws)
    git(ws, "fsck", "--strict")


@pytest.mark.parametrize(
    "flags", [("--agent", "researcher"), ("--tmp", "1h"), ("--new",), ("--hidden",)]
)
def test_options_for_a_new_conversation_are_refused_with_id(ws: Path, cli, flags) -> None:  # type: ignore[no-untyped-def]
    assert cli("c", "new", "a", "--no-activate").code == 0
    head = rgit(ws, "rev-parse", "HEAD")
    refused = cli("query", "--id", "a", *flags, "--non-interactive", "hello")
    assert refused.code == 2
    assert f"{flags[0]} applies only to a new conversation" in refused.stderr
    assert rgit(ws, "rev-parse", "HEAD") == head  # nothing was written
    both = cli("query", "--id", "a", "--new", "--hidden", "hello")
    assert both.code == 2 and "--new, --hidden apply only to a new conversation" in both.stderr


def test_no_onboard_applies_to_a_conversation_that_has_not_started(
    ws: Path,
    cli,
    api_env,  # type: ignore[no-untyped-def]
) -> None:
    from tests.messages_server import text_reply, tool_use_reply

    # `c new --no-onboard`: its snapshot has onboarding off.
    assert cli("c", "new", "quiet", "--no-onboard", "--no-activate").code == 0
    toml = (ws / "conversations" / "quiet" / "conversation.toml").read_text(encoding="utf-8")
    assert "enabled = false" in toml.split("[config.onboarding]")[1].split("[")[0]
    # `c new`, then `query --id X --no-onboard`: it starts work at once.
    assert cli("c", "new", "later", "--no-activate").code == 0
    api_env.enqueue(text_reply("done at once"))
    done = cli("query", "--id", "later", "--no-onboard", "--non-interactive", "do it")
    assert (done.code, done.stdout) == (0, "done at once\n"), done.stderr
    assert all(t["name"] != "ask_caller" for t in api_env.bodies[0].get("tools", []))
    # Once it asked, there is nothing to skip: refused, saying so.
    assert cli("c", "new", "asks", "--no-activate").code == 0
    api_env.enqueue(tool_use_reply(("ask_caller", {"questions": ["Which one?"]})))
    assert cli("query", "--id", "asks", "--non-interactive", "do it").code == 4
    refused = cli("query", "--id", "asks", "--no-onboard", "--non-interactive", "answer")
    assert refused.code == 1
    assert "--no-onboard applies to a conversation that has not started" in refused.stderr


def test_grep_reads_like_grep(ws: Path, cli) -> None:
    """ID:FILE:LINE: text; -l, -c, -C N; matches highlighted on a terminal only; flags
    that cannot go together refused."""
    import pty

    cli("c", "new", "a")
    cli("c", "new", "b")
    notes = "one\ntwo needle\nthree\nfour\nfive\nsix needle\nseven\n"
    (ws / CONV / "a" / "notes.md").write_text(notes, encoding="utf-8")
    (ws / CONV / "b" / "notes.md").write_text("a Needle here\n", encoding="utf-8")
    assert cli("c", "grep", "needle").stdout.splitlines() == [
        "a:notes.md:2: two needle",
        "a:notes.md:6: six needle",
    ]
    assert cli("c", "grep", "-i", "-l", "needle").stdout.splitlines() == [
        "a:notes.md",
        "b:notes.md",
    ]
    assert cli("c", "grep", "-c", "needle").stdout == "a:notes.md:2\n"
    counted = json.loads(cli("c", "grep", "-c", "-i", "needle", "--format", "json").stdout)
    assert counted == [
        {"id": "a", "file": "notes.md", "count": 2},
        {"id": "b", "file": "notes.md", "count": 1},
    ]
    assert cli("c", "grep", "-C", "1", "needle").stdout.splitlines() == [
        "a:notes.md-1- one",
        "a:notes.md:2: two needle",
        "a:notes.md-3- three",
        "--",
        "a:notes.md-5- five",
        "a:notes.md:6: six needle",
        "a:notes.md-7- seven",
    ]
    for argv, words in (
        (("-l", "-c"), "-l and -c cannot go together"),
        (("-C", "2", "-l"), "-C applies only to the text listing"),
        (("-C", "2", "--format", "json"), "-C applies only to the text listing"),
        (("-C", "-1"), "must be 0 or more"),
    ):
        refused = cli("c", "grep", *argv, "needle")
        assert refused.code == 2 and words in refused.stderr, (argv, refused.stderr)
    helped = cli("c", "grep", "--help").stdout
    for option in ("--ignore-case", "--hidden", "--files-with-matches", "--count", "--context"):
        line = next(x for x in helped.splitlines() if option in x)
        assert len(line.split(option, 1)[1].strip()) > 3, f"{option} has no help: {line!r}"
    # On a terminal the match is marked (bold red, as grep --color=auto); piped, not.
    parent, child = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    import subprocess
    import sys

    with os.fdopen(parent, "rb") as reader:
        proc = subprocess.run(
            [sys.executable, "-m", "jpfs", "c", "grep", "six"],
            cwd=ws, stdout=child, stderr=subprocess.PIPE, env=env, check=False, timeout=60,
        )  # fmt: skip
        os.close(child)
        shown = reader.read1(4096).decode()
    assert proc.returncode == 0, proc.stderr
    assert "a:notes.md:6: \x1b[1;31msix\x1b[0m needle" in shown
    assert "\x1b[" not in cli("c", "grep", "six").stdout
