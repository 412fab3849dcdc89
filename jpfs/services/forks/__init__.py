"""Branches model forks: a fork's branch and worktree (:mod:`.branches`), merging it into
its caller's workspace (:mod:`.merge`), and removing it (:mod:`.worktrees`)."""
