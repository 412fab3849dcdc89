"""Who jpfs commits as when git knows nobody (no ``user.name`` / ``user.email`` and no
``GIT_*`` identity in the environment): a repository without an identity still gets
its commits, as ``jpfs <jpfs@localhost>``, rather than an error on the first run."""

from __future__ import annotations

from types import MappingProxyType

FALLBACK_NAME = "jpfs"
FALLBACK_EMAIL = "jpfs@localhost"

# The same identity as git reads it from the environment, for git commands run.
FALLBACK_ENV = MappingProxyType(
    {
        "GIT_AUTHOR_NAME": FALLBACK_NAME,
        "GIT_AUTHOR_EMAIL": FALLBACK_EMAIL,
        "GIT_COMMITTER_NAME": FALLBACK_NAME,
        "GIT_COMMITTER_EMAIL": FALLBACK_EMAIL,
    }
)
