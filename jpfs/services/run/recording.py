"""A run's record of its own files: each event appended and committed, and the caller's
hand edits committed before the run reacts to them.

The run's first commit takes the whole of ``events/``, later ones only the events
written since (O(changed), not O(events)): a :class:`Recorder` keeps, per conversation,
the newest event its current run committed. Each
:class:`jpfs.services.run.runtime.Runner` is given one (it builds its own by default);
``after_commit`` (the runner's hook: the daemon stops a run between steps there) is
called after each commit of the run's own files, the events ``record_event`` commits
included.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jpfs.core import record, tree
from jpfs.core.conversation import ANSWERS, EVENTS, TASK, Conversation, Event
from jpfs.core.record import agent_identity
from jpfs.core.state import State
from jpfs.core.workspace import Workspace
from jpfs.errors import ConversationGone, ExistsError, NotFoundError
from jpfs.services.conversations import runs
from jpfs.services.run.hooks import NONE


def _seq(name: tuple[int, str, str]) -> int:
    return name[0]


@dataclass
class Recorder:
    """The events and commits of a runner's runs. Thread-safe for distinct conversations."""

    ws: Workspace
    after_commit: Callable[[Conversation, str], None] = NONE.after_commit
    # conversation id -> newest event committed by its current run (see commit()).
    _committed_events: dict[str, int] = field(default_factory=dict)

    def begin(self, conv: Conversation) -> None:
        """A new run of ``conv``: its first commit looks at all of events/."""
        self._committed_events.pop(conv.id, None)

    def record_event(
        self,
        conv: Conversation,
        role: str,
        body: str,
        meta: Mapping[str, Any] | None = None,
        *,
        event: str,
        **kwargs: Any,
    ) -> Event:
        """Append an event and commit it as ``event`` (``kwargs`` as :meth:`commit`).

        The event file is made by the committer as it commits (``Change.creates``): with
        many runs in one process, a file creation in each run's own thread cost every
        other run hand-offs of the interpreter lock (50 writers: p99 46 -> 38 ms)."""
        new, text = conv.prepare_event(role, body, meta)
        try:
            self.commit(conv, event, created=(new, text), **kwargs)
        except ExistsError as exc:
            raise conv.clash(new) from exc
        except NotFoundError as exc:
            if isinstance(exc, ConversationGone):
                raise
            # events/ was removed since the handle listed it: the usual append makes it
            # again, or finds the conversation gone.
            appended = conv.append_event(role, body, meta)
            self.commit(conv, event, **kwargs)
            return appended
        conv.adopt_event(new)
        return new

    def commit(
        self,
        conv: Conversation,
        event: str,
        *,
        created: tuple[Event, str] | None = None,
        **kwargs: Any,
    ) -> None:
        """Commit the run's own files of ``conv``; ``created``: an event from
        :meth:`Conversation.prepare_event` and its text, made by the committer."""
        agent = conv.agent or "agent"
        if "paths" in kwargs:
            if created is not None:
                raise TypeError("an event is created only by a commit of the run's own files")
            record.commit(
                self.ws, conv.id, event, agent=agent, author=agent_identity(agent), **kwargs
            )
            self.after_commit(conv, event)
            return
        # The run's first commit takes the whole events/ (whatever happened before it);
        # later ones only the events written since: O(changed), not O(events). The
        # handle's listing is reused while events/ is unchanged; an event another writer
        # adds within the same clock tick is committed by the next commit, as `since`
        # is the last event seen (Conversation.known_event_names).
        names = conv.known_event_names()
        since = self._committed_events.get(conv.id)
        first_new = 0 if since is None else bisect.bisect_right(names, since, key=_seq)
        new = None if since is None else [name for _, _, name in names[first_new:]]
        last = names[-1][0] if names else 0
        creates: tuple[tuple[str, str], ...] = ()
        if created is not None:
            made, text = created
            name = f"{EVENTS}/{made.path.name}"
            creates = ((f"{self.ws.rel(conv.path)}/{name}", text),)
            if new is not None:
                new.append(made.path.name)
            last = max(last, made.seq)
        paths = runs.own_paths(self.ws, conv, new)  # not running children's
        record.commit(
            self.ws,
            conv.id,
            event,
            paths=paths,
            agent=agent,
            author=agent_identity(agent),
            creates=creates,
            **kwargs,
        )
        self._committed_events[conv.id] = last
        self.after_commit(conv, event)

    def commit_caller_edits(self, conv: Conversation) -> None:
        """Commit what the caller wrote by hand (task.md, answers.md...) as the user, so
        history shows their input before the agent's reaction, never folded into it."""
        event = "edit"
        state = tree.state_of(conv)
        if state is State.ONBOARDING and conv.read(ANSWERS) is not None:
            event = "answers"
        elif not conv.event_names() and conv.read(TASK) is not None:
            event = "task"
        paths = runs.own_paths(self.ws, conv)
        names = conv.event_names()
        record.commit(self.ws, conv.id, event, agent=conv.meta().get("agent"), paths=paths)
        self._committed_events[conv.id] = names[-1][0] if names else 0
