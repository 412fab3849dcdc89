"""Services: what jpfs does, one subpackage per capability, each above the ones it uses.

=================  =========================================================================
``views``          read-only views of the record: tree/top, grep, log, cost, doctor
``daemon``         the background daemon: watch, reconcile, run (protocol/daemon.md)
``run``            running a conversation: the runner, query, fork/kill/continue, background
``sync``           many machines, one git remote: fetch, leases, pushes, leak checks
``conversations``  a conversation's files: create/remove, mail, onboarding, input, reports,
                   budgets, and this process's runs
``forks``          branches model forks: a fork's branch and worktree, merge, discard
``workspace``      a workspace's set-up and what it allows: init, migrate, policy, trust
=================  =========================================================================

import-linter keeps the order of this table (pyproject.toml): a package imports only the
ones below it, and each package declares its own inner layers.
"""
