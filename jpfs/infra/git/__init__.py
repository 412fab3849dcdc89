"""Everything jpfs asks of git, outside the committer (which writes the record itself).

    runner.py     the git program: argv lists only, one translation into GitError
    refs.py       refs and ancestry read in process (pygit2)
    remote.py     fetch, and atomic compare-and-swap pushes
    checkout.py   a work tree moved between two commits (read-tree -m -u), as merges do
    treediff.py   a branch's tip and what its commits changed (pygit2)
    objects.py    objects read and written in process for a few services (pygit2)
    untracked.py  the files git does not track, cached by directory stamps
    ignore.py     what git ignores in a work tree
    dirs.py       where a work tree's git directories are
    identity.py   who jpfs commits as when git knows nobody

**One way to run git porcelain: the runner.** GitPython's porcelain (``Repo.git.<cmd>``)
runs the same ``git`` process, so it saves nothing per call (``rev-parse``: 1.20 ms
against 1.19 ms for the runner), while ``import git`` costs 64 ms of start-up and
``Repo(...)`` a handle to keep (bench/RESULTS.md). jpfs uses it for nothing else, so it
is not used at all: porcelain goes through :func:`run` (its ``output``, ``start`` and
``stop`` beside it; ``failure`` words the refusal of a caller that ran git unchecked).
pygit2 is used where a process per question would be the cost: reading refs
and ancestry (:mod:`.refs`), walking tree diffs (:mod:`.treediff`), the committer, and
the object reads and writes of a few services (:mod:`.objects`); nothing above the
infra layer imports it.
"""

from __future__ import annotations

from jpfs.infra.git.runner import complaint, failure, output, run, start, stop

__all__ = ["complaint", "failure", "output", "run", "start", "stop"]
