"""Many machines, one git remote: the record shared by fetch and push, turns claimed by
leases on the remote (``engine``: the cycle and claims; ``leases``: the lease book;
``record``: merging a peer's record into ours). See protocol/sync.md."""
