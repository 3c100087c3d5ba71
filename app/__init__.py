"""Tandem: a desktop chat app for local GGUF models built around speculative decoding.

Layers (see DESIGN.md): ``app.engine`` (llama.cpp sessions, drafters, the speculative
loop), ``app.catalog`` (GGUF metadata, draft pairing, downloads), ``app.store`` (history,
settings, paths) are Qt-free; ``app.ui`` holds every widget; ``app.cli`` drives the same
services from a terminal.
"""

__version__ = "0.1.0"
