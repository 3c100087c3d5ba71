"""The window's "Serve API" panel: the switch, the port, the base URL to copy, and the
recent API requests."""

from app.ui.api.api_panel import ApiPanelWidget

__all__ = ["ApiPanelWidget"]
