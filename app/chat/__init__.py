"""The Qt-free service under every front end: the window, the race window and the
local API.

* :mod:`app.chat.service` — :class:`ChatService`: owns the session on one worker thread,
  runs jobs one at a time from a bounded queue, cancels per job, reports every event and
  every failure as a value (:mod:`app.chat.events`, :mod:`app.chat.failures`);
* :mod:`app.chat.conversation` — :class:`ChatController`: the chat window's logic
  (stored conversation → request, reply buffer, partial and final saves, models,
  settings), driven through a :class:`ChatView`;
* :mod:`app.chat.reply` — the streaming reply's text, draft spans and save schedule;
* :mod:`app.chat.measure` — races, k sweeps and lookup estimates as service jobs
  (requests in :mod:`app.chat.requests`, the race record in :mod:`app.chat.recording`,
  past conversations in :mod:`app.chat.history_source`);
* :mod:`app.chat.demo` — the bundled demo model.

See docs/architecture.md for the path of one message through these pieces.
"""

from app.chat.conversation import ActiveReply, ChatController, ChatView
from app.chat.events import UserError
from app.chat.service import ChatService, Job, JobContext, JobError, QueueFullError

__all__ = [
    "ActiveReply",
    "ChatController",
    "ChatService",
    "ChatView",
    "Job",
    "JobContext",
    "JobError",
    "QueueFullError",
    "UserError",
]
