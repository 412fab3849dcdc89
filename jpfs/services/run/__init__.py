"""Running conversations: the runner (:mod:`.runtime`), ``query`` (:mod:`.query`) and its
hand-off to a daemon (:mod:`.handoff`), fork/kill/continue (:mod:`.control`) and runs
started without a wait (:mod:`.background`)."""
