"""The fenced code blocks of README.md and protocol/*.md, for ``tests/docs/test_docs.py``.

A block is found by its opening fence (three or more backticks or tildes, indented by
at most a list item's indentation) and ends at the first closing fence of the same
character and at least the same length; the fence's indentation is removed from
every line, as Markdown does for a block inside a list item. A fence left open runs to
the end of the file, as in CommonMark, and :func:`blocks` reports it as an error
instead, because that is always a mistake in these documents.

Each block has a stable key: the file and the first 8 hex digits of the SHA-256 of its
info string and text. Any change to a block (or to its language) changes its key, so the test's registry notices
every block that is added or changed and asks for a handler (or a reason).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_FENCE = re.compile(r"^(?P<indent> {0,4})(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")


@dataclass(frozen=True)
class Block:
    path: str  # relative to the repository root: "README.md", "protocol/agents.md"
    line: int  # 1-based line of the opening fence
    info: str  # the info string: "sh", "toml", "" ...
    text: str  # the content, fence indentation removed; ends with "\n" unless empty

    @property
    def digest(self) -> str:
        return hashlib.sha256(f"{self.info}\n{self.text}".encode()).hexdigest()[:8]

    @property
    def key(self) -> str:
        return f"{self.path}#{self.digest}"

    @property
    def first(self) -> str:
        """The first non-blank line, stripped (how the registry names a block for humans)."""
        return next((s.strip() for s in self.text.splitlines() if s.strip()), "")

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    def numbered(self) -> list[tuple[int, str]]:
        """(line number in the file, line) for each line of the block."""
        return [(self.line + 1 + i, s) for i, s in enumerate(self.text.splitlines())]


def documents(root: Path = ROOT) -> list[Path]:
    """README.md and every protocol/*.md, in a stable order."""
    return [root / "README.md", *sorted((root / "protocol").glob("*.md"))]


def parse(path: Path, root: Path = ROOT) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    rel = path.relative_to(root).as_posix()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None or (m["fence"][0] == "`" and "`" in m["info"]):
            i += 1
            continue
        indent, fence = len(m["indent"]), m["fence"]
        closing = re.compile(rf"^ {{0,{indent + 3}}}{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        j = i + 1
        while j < len(lines) and not closing.match(lines[j]):
            j += 1
        if j == len(lines):
            raise ValueError(f"{rel}:{i + 1}: a code block is never closed")
        body = [s[indent:] if s[:indent].strip() == "" else s.lstrip() for s in lines[i + 1 : j]]
        text = "\n".join(body) + ("\n" if body else "")
        found.append(Block(rel, i + 1, m["info"].strip(), text))
        i = j + 1
    return found


def blocks(root: Path = ROOT) -> list[Block]:
    """Every fenced code block of the documents, in document order."""
    return [b for path in documents(root) for b in parse(path, root)]
