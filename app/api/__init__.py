"""The local OpenAI-compatible API: a third front end of the chat service, beside the
window and the command line.

:mod:`app.api.protocol` reads OpenAI request bodies and writes responses, llama-server's
``timings`` and OpenAI's error JSON; :mod:`app.api.app` is the Starlette application
whose requests become jobs of :class:`~app.chat.service.ChatService` (one generation at a
time, in the queue the window's replies share); :mod:`app.api.server` runs it with
uvicorn, in the foreground (``python -m app serve``) or on a thread (the window's "Serve
API" switch); :mod:`app.api.traffic` keeps the recent requests the window lists. No Qt.

Per-request speculation: the extra body field ``"speculation"`` takes any field of
:class:`~app.options.SpeculationConfig` (``mode``: ``off``, ``prompt-lookup``,
``draft-model``; ``draft_max``; ``draft_min``; ``draft_p_min``; ``ngram_min``;
``ngram_max``; ``adaptive``) over the server's default.
"""
