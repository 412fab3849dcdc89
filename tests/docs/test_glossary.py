"""protocol/glossary.md keeps its terms linked (issue #48).

Every entry links to where its word is specified; every relative link names a file that
exists and, with an anchor, a heading of that file that makes the anchor (GitHub's
rule: the heading's text in lower case, punctuation dropped, spaces as ``-``, a
repeated heading numbered ``-1``, ``-2``...); the words a newcomer could not look up
before are there; the entries are in alphabetical order; and the protocol's index links
to the glossary. The checks run on a broken glossary too, to show that they fail.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docs.docblocks import parse

ROOT = Path(__file__).resolve().parents[2]
GLOSSARY = ROOT / "protocol" / "glossary.md"

# The words issue #48 found with no definition, then the protocol's main nouns.
ISSUE_TERMS = (
    "record", "claim", "lease", "look", "probe", "adopt", "admit", "settle", "seen",
    "heal", "debt", "foreign", "kept", "stood in",
)  # fmt: skip
NOUNS = (
    "conversation", "id", "segment", "caller", "sub-agent", "child", "onboarding",
    "round", "task", "answers", "questions", "result", "event", "inbox", "mail",
    "status message", "status report", "profile", "[config] snapshot", "allow-list",
    "agents.allowed", "trust", "daemon", "reconciler", "run", "run lock", "turn",
    "tool loop", "fork", "branch workspace", "worktree", "merge", "budget", "usage",
    "price", "prompt cache", "breakpoint", "view", "cut", "context window", "thinking",
    "preserved thinking", "steering", "note", "interrupt", "sync", "remote",
    "tombstone", "incarnation", "trailers", "provenance", "blame", "template",
    "batch onboarding", "redaction", "scope", "subtree", "hidden", "killed", "failed",
)  # fmt: skip

_ENTRY = re.compile(r"^- (?P<names>\*\*[^*]+\*\*(?:, \*\*[^*]+\*\*)*): ")
_NAME = re.compile(r"\*\*([^*]+)\*\*")
_LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(?P<text>.*?)\s*#*\s*$")


@dataclass(frozen=True)
class Entry:
    names: tuple[str, ...]  # as written, backticks dropped: "[config] snapshot"
    line: int
    text: str

    @property
    def links(self) -> list[str]:
        return [m["target"] for m in _LINK.finditer(self.text)]


def entries(path: Path) -> list[Entry]:
    """The glossary's entries: a list item ``- **term**[, **alias**]: text`` and the
    indented lines right after it that continue it."""
    found: list[Entry] = []
    last = 0  # the line number of the entry's last line, 0 outside an entry
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        head = _ENTRY.match(line)
        if head:
            names = tuple(n.replace("`", "") for n in _NAME.findall(head["names"]))
            found.append(Entry(names, number, line))
        elif line.startswith("  ") and last == number - 1 and found:
            entry = found.pop()
            found.append(Entry(entry.names, entry.line, f"{entry.text}\n{line}"))
        elif line.startswith("- "):
            raise AssertionError(f"{path.name}:{number}: not `- **term**: text`: {line}")
        else:
            continue
        last = number
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading (before numbering repeats)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors a markdown file's headings make (headings in code blocks do not)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    for block in parse(path, path.parent):
        span = range(block.line - 1, block.line + len(block.text.splitlines()) + 1)
        for i in span:
            lines[i] = ""
    seen: dict[str, int] = {}
    made = set()
    for line in lines:
        heading = _HEADING.match(line)
        if heading is None:
            continue
        base = slug(heading["text"])
        count = seen.get(base, 0)
        seen[base] = count + 1
        made.add(base if count == 0 else f"{base}-{count}")
    return made


def broken_links(path: Path) -> list[str]:
    """Each link of the glossary at ``path`` that leads nowhere, with why."""
    problems = []
    for entry in entries(path):
        for target in entry.links:
            where = f"{path.name}:{entry.line}: {entry.names[0]}: {target}"
            file, _, anchor = target.partition("#")
            if re.match(r"^[a-z]+:", file) or file.startswith("/"):
                problems.append(f"{where}: not a relative link into the repository")
                continue
            linked = (path.parent / file).resolve() if file else path
            if not linked.is_file():
                problems.append(f"{where}: no such file")
            elif anchor and linked.suffix != ".md":
                problems.append(f"{where}: an anchor into a file that is not markdown")
            elif anchor and anchor not in anchors(linked):
                problems.append(f"{where}: no heading of {linked.name} makes #{anchor}")
    return problems


def sort_key(name: str) -> str:
    return re.sub(r"[^a-z0-9 ]", "", name.lower()).strip()


def test_every_entry_links_to_where_it_is_specified() -> None:
    found = entries(GLOSSARY)
    assert len(found) > 60
    unlinked = [e.names[0] for e in found if not e.links]
    assert not unlinked, f"entries without a link: {unlinked}"


def test_every_link_names_a_file_and_heading_that_exist() -> None:
    assert broken_links(GLOSSARY) == []


def test_the_words_of_issue_48_and_the_protocols_nouns_are_defined() -> None:
    defined = {name.lower() for entry in entries(GLOSSARY) for name in entry.names}
    missing = [t for t in (*ISSUE_TERMS, *NOUNS) if t.lower() not in defined]
    assert not missing, f"not in protocol/glossary.md: {missing}"


def test_the_entries_are_in_alphabetical_order() -> None:
    names = [sort_key(e.names[0]) for e in entries(GLOSSARY)]
    out_of_order = [(a, b) for a, b in itertools.pairwise(names) if a > b]
    assert not out_of_order, f"out of alphabetical order: {out_of_order}"
    assert len(set(names)) == len(names), "a term has two entries"


def test_the_glossary_has_no_code_block_and_the_protocol_index_links_it() -> None:
    assert parse(GLOSSARY, ROOT) == []
    index = (ROOT / "protocol" / "README.md").read_text(encoding="utf-8")
    assert "(glossary.md)" in index


def test_anchors_are_githubs() -> None:
    doc = ROOT / "protocol" / "daemon.md"
    made = anchors(doc)
    assert {"jpfs-query-handed-over", "your-branch-your-git-habits", "adoption"} <= made
    # a heading inside a code block makes no anchor (daemon.md's .gitignore comment)
    assert not any(a.startswith("jpfs-editors") for a in made)
    assert slug("### conversation.toml".lstrip("# ")) == "conversationtoml"


@pytest.mark.parametrize(
    ("link", "why"),
    [
        ("[layout.md](layout.md#no-such-heading)", "no heading of layout.md makes"),
        ("[gone.md](gone.md)", "no such file"),
        ("[x](../jpfs/core/no_such_module.py)", "no such file"),
        ("[x](../jpfs/core/ids.py#segments)", "not markdown"),
        ("[x](https://example.com/)", "not a relative link"),
        ("[x](daemon.md#jpfs-editors-swapbackup-files-and-jpfss-temporary-files)", "makes"),
    ],
)
def test_a_link_that_leads_nowhere_is_found(tmp_path: Path, link: str, why: str) -> None:
    protocol = tmp_path / "protocol"
    protocol.mkdir()
    for doc in ("layout.md", "daemon.md"):
        (protocol / doc).write_text(
            (ROOT / "protocol" / doc).read_text(encoding="utf-8"), encoding="utf-8"
        )
    (tmp_path / "jpfs" / "core").mkdir(parents=True)
    (tmp_path / "jpfs" / "core" / "ids.py").write_text("", encoding="utf-8")
    glossary = protocol / "glossary.md"
    good = "[layout.md](layout.md#conversation-ids)"
    glossary.write_text(f"# Glossary\n\n- **id**: a path ({good}, {link}).\n", encoding="utf-8")
    problems = broken_links(glossary)
    assert len(problems) == 1 and why in problems[0], problems


def test_an_entry_without_a_link_or_out_of_shape_is_found(tmp_path: Path) -> None:
    glossary = tmp_path / "glossary.md"
    glossary.write_text("- **id**: a path,\n  with no link.\n", encoding="utf-8")
    assert [e.links for e in entries(glossary)] == [[]]
    glossary.write_text("- id: a path ([layout.md](layout.md)).\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="not `- \\*\\*term\\*\\*: text`"):
        entries(glossary)
