"""The race window: speculation off vs on side by side, the k sweep, the prompt-lookup
estimate and the speedup calculator. See :mod:`app.ui.race.race_window`."""

from app.chat.history_source import PastConversation, conversations_from_history
from app.ui.race.race_window import RaceWindow

__all__ = ["PastConversation", "RaceWindow", "conversations_from_history"]
