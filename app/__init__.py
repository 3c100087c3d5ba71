"""Tandem: a desktop chat app for local GGUF models built around speculative decoding.

Layers, top to bottom (docs/architecture.md): ``app.ui`` (every widget) and ``app.cli``
(argparse and printing); ``app.chat`` (the service that owns the session and the chat
logic); ``app.engine`` (llama.cpp sessions, drafters, the speculative loop, measurement);
``app.catalog`` (GGUF headers, pairing, downloads) and ``app.launcher``; ``app.store``
(history, settings, paths); ``app.options``, ``app.formatting``, ``app.errors``. Only
``app.ui`` imports Qt.
"""

__version__ = "0.1.0"
