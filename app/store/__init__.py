"""Qt-free persistence: folders (:mod:`.paths`), settings (:mod:`.settings`) and chat
history (:mod:`.history`). The window and the CLI both build on it; it imports nothing
from the engine or the UI."""
