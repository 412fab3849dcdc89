"""Many machines, one git remote: the record shared by fetch and push, turns claimed by
leases on the remote (``engine``: the cycle; ``claims``: every run claimed; ``leases``: the
lease book; ``record``: merging a peer's record into ours; ``leaks``: the secret check
before a push and ``jpfs scan``; ``manual``: ``jpfs sync``). See protocol/sync.md."""
