"""The background daemon: file events -> reconciler -> agent pool (see protocol/daemon.md).

process.py     one daemon per workspace: lock, pid, status file, detach, signals
watcher.py     watchdog observer on the conversation root, filters, debounce
edits.py       which files differ from HEAD; committing a human's edits
actions.py     what a conversation needs (:func:`actions.needs`), adopt, failures
outcomes.py    a run failed (the conversation's fault) or postponed (the machine's)
reconciler.py  events and scans -> "look at conversation X" -> commit, adopt, queue
seen.py        what the last look found, by stat signature (cheap rescans, restarts)
pool.py        the agent pool: global limit, fair across subtrees
recovery.py    start-up chores after a crash: dead locks, debris, .gitignore
procfs.py      which files a process has open (Linux /proc)
queryserver.py `jpfs query` handed over on .jpfs/local/query.sock
service.py     wiring, start-up, shutdown, status, logging
"""
