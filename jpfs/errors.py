"""The one exception tree users see.

Every error a user can cause or fix derives from :class:`JpfsError`; the CLI's
error handler turns it into a one-line message and exit status 1. Anything else that
escapes is a bug (exit 3, traceback logged). Foreign errors (the git program, pygit2,
tomlkit, anthropic, OS) are translated once, where they happen, with
``raise ... from exc`` so the cause stays in the traceback log (git's exit statuses
in :mod:`jpfs.infra.git.runner`).

    JpfsError
    ├── WorkspaceError        no workspace, not a git repo, bad layout
    ├── ConfigError           bad config.toml / --cfg / env value, unknown key
    │   └── ProfileError      bad or missing agent profile
    │       └── UntrustedProfile  a profile that runs programs, not trusted here yet
    ├── FormatError           malformed TOML front matter or conversation.toml
    ├── IdError               malformed conversation id (slug rules, reserved names)
    ├── ArgumentError         an argument out of its range, refused by the core for every
    │                         way in alike (CLI, tools, MCP); exit 2 at the command line
    ├── ScopeError            id or path outside the caller's subtree / workspace
    ├── NotFoundError         no such conversation, message, file
    │   └── ConversationGone  its directory was removed while jpfs wrote to it
    ├── ExistsError           conversation already exists
    ├── StateError            operation not valid in the conversation's state
    ├── LockError             a conversation is busy (another run holds its lock)
    ├── LimitError            max_children / max_depth / max_agents / turns exceeded
    │   └── BudgetError       a subtree's token or dollar budget, or a run's time, is spent
    ├── GitError              a git operation failed (conflict, CAS exhausted, ...)
    │   ├── MergeConflict     merge would conflict; carries the paths
    │   ├── Contended         the record's push lost to other machines' every try: no
    │   │                     fault (a daemon tries again at its next cycle, quietly)
    │   └── RepositoryFault   the repository cannot be read or written now (read-only,
    │                         full disk, corrupt object): not the conversation's fault
    ├── ProviderError         the model provider failed after retries
    │   └── ContextOverflow   the server refused a prompt for its length; carries the
    │                         sizes it named (the run shrinks its prompt and tries again)
    ├── Cancelled             a run was cancelled (kill, daemon stop, Ctrl-C): not a
    │   │                     failure of anyone's; exit 130 at the command line
    │   └── Interrupted       a model call cut short by mail asking to interrupt it: the
    │                         run delivers the mail and calls again (never reaches a user)
    ├── ToolError             a tool call was refused or failed (returned to the model)
    │   └── ToolFailure       it ran and failed; carries its full result (a failed sub-agent)
    ├── DaemonError           daemon start/stop/status problems
    └── PatternError          bad grep pattern (exit 2, as grep does)
"""

from __future__ import annotations

import errno
from collections.abc import Sequence

# The OS's ways of saying the machine's storage takes no writes now
# (RepositoryFault.of).
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_STORAGE_ERRNOS = _FULL_ERRNOS | {errno.EROFS, errno.EIO}


class JpfsError(Exception):
    """Base of every user-facing error. ``str(err)`` is the one-line message."""

    exit_code = 1


class WorkspaceError(JpfsError):
    pass


class ConfigError(JpfsError):
    pass


class ProfileError(ConfigError):
    pass


class UntrustedProfile(ProfileError):
    """A profile that runs local programs is not trusted on this machine (jpfs.services.workspace.trust)."""


class FormatError(JpfsError):
    pass


class IdError(JpfsError):
    pass


class ArgumentError(JpfsError):
    exit_code = 2


class ScopeError(JpfsError):
    pass


class NotFoundError(JpfsError):
    pass


class ConversationGone(NotFoundError):
    """A conversation's directory was removed (by a person, mid-run): nothing is written
    to it any more, rather than bring back a directory of one file."""


class ExistsError(JpfsError):
    pass


class StateError(JpfsError):
    pass


class LockError(JpfsError):
    pass


class LimitError(JpfsError):
    pass


class BudgetError(LimitError):
    """A budget (``limits.budget_tokens`` / ``budget_usd``) or ``max_run_seconds`` is
    spent: the run stops before its next model call, and says which and by how much."""


class GitError(JpfsError):
    pass


class MergeConflict(GitError):
    def __init__(self, message: str, paths: Sequence[str]) -> None:
        super().__init__(message)
        self.paths = list(paths)


class Contended(GitError):
    """Other machines pushed the record first at every try (each a compare-and-swap):
    nothing is wrong, and nothing for anyone to fix; the next sync tries again."""


class RepositoryFault(GitError):
    """The repository failed under jpfs (I/O error, read-only objects, a full disk, a
    corrupt object). The daemon retries the run later with backoff instead of failing
    the conversation: the fault is the machine's, and fixing it must be enough."""

    @classmethod
    def of(cls, exc: BaseException) -> RepositoryFault | None:
        """``exc`` as the machine's fault: itself if it is one; the OS's word that the
        storage takes no writes now (a full disk or quota, a read-only or failing file
        system) translated; else None. The OS says so wherever jpfs writes, so the
        boundaries that would otherwise call it a bug (a run, a look, a command) ask."""
        if isinstance(exc, RepositoryFault):
            return exc
        if not isinstance(exc, OSError) or exc.errno not in _STORAGE_ERRNOS:
            return None
        where = f" ({exc.filename})" if exc.filename else ""
        fix = "free some space" if exc.errno in _FULL_ERRNOS else "check the file system"
        return cls(f"{exc.strerror or exc}{where}: {fix}; jpfs carries on once it can write")


class ProviderError(JpfsError):
    pass


class ContextOverflow(ProviderError):
    """A prompt refused for its length: ``tokens`` (the prompt's size the server counted,
    None when it did not say) and ``window`` (the model's context window it named)."""

    def __init__(self, message: str, tokens: int | None, window: int) -> None:
        super().__init__(message)
        self.tokens = tokens
        self.window = window


class Cancelled(JpfsError):
    """The run was cancelled (kill, daemon stop) while a provider or tool worked."""


class Interrupted(Cancelled):
    """A model call cut short by mail that asked to interrupt it (steering)."""

    exit_code = 130


class ToolError(JpfsError):
    pass


class ToolFailure(ToolError):
    """A tool that ran and failed, with a full result for the caller (a sub-agent's
    ``<error conversation_id=...>`` answer): an error result, never a plain one."""

    def __init__(self, result: str) -> None:
        super().__init__(result.strip().splitlines()[0] if result.strip() else "failed")
        self.result = result


class DaemonError(JpfsError):
    pass


class PatternError(JpfsError):
    """A bad search pattern: exit status 2, like grep."""

    exit_code = 2
