"""A workspace's set-up and what it allows: ``jpfs init`` (:mod:`.bootstrap`), ``jpfs
migrate`` (:mod:`.migrate`), which profile a run uses (:mod:`.policy`) and which profiles
may run programs here (:mod:`.trust`)."""
