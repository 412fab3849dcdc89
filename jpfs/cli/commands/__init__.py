"""One module per verb (or verb group), named in main.COMMANDS; a group's module holds
its table (``COMMANDS``, a :class:`jpfs.cli.lazygroup.Commands`).

A command imports what does the work (``jpfs.core``, ``jpfs.services``, ``jpfs.infra``,
``jpfs.mcp``, ``jpfs.api``) in its function, when it runs: help and every other command
would pay for them otherwise (start-up, measured in bench/bench_cli.py). Everything
else is imported at the top.
"""
