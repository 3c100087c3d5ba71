"""The one exception family whose messages are shown to the user as they are.

Every layer raises a subclass of :class:`TandemError` for problems the user can act on
(a broken GGUF, an incompatible draft, a full disk, a prompt that does not fit). The CLI
prints ``str(error)`` on one line and exits with status 2; the window shows it in a
message bar. Anything else that escapes is a bug and is reported with its traceback in
the log only.
"""

from __future__ import annotations


class TandemError(Exception):
    """An error whose message is written for the user and shown verbatim."""


class FolderError(TandemError, OSError):
    """A folder Tandem needs is a file, or cannot be created (read-only, no permission, a
    drive that is gone); an OSError too, for callers that catch those."""


class ModelLoadError(TandemError):
    """A GGUF file could not be loaded (missing, not a GGUF, corrupt, out of memory)."""


class LoadCancelledError(TandemError):
    """Model loading was cancelled by the user."""


class IncompatibleDraftError(TandemError):
    """The draft model cannot draft for the target (tokenizers differ)."""


class ModelNotLoadedError(TandemError):
    """Work that needs the loaded model was asked for while none is loaded."""


class ContextOverflowError(TandemError):
    """The prompt does not fit in the context window."""


class GGUFError(TandemError):
    """A file is not a readable GGUF (bad magic, truncated, absurd sizes or offsets)."""


class DownloadError(TandemError):
    """A model download failed; the message says why and what to do."""


class HubError(DownloadError):
    """The model hub answered a request with an error.

    Attributes:
        status: the HTTP status of the answer, where there was one (None otherwise).
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class HubNotFoundError(HubError):
    """The repository, revision or file does not exist on the hub (or is private)."""


class HubRepoNotFoundError(HubNotFoundError):
    """The repository does not exist on the hub, or is private or gated to this user."""


class HubRevisionNotFoundError(HubNotFoundError):
    """The repository has no such revision (branch, tag or commit)."""


class HubFileNotFoundError(HubNotFoundError):
    """The repository has no such file at the revision."""


class HubAccessError(HubError):
    """The hub refused access (HTTP 401 or 403): log in, or accept a licence."""


class HubGatedRepoError(HubAccessError):
    """The repository is gated: its licence must be accepted on the hub's page first."""


class HubRateLimitError(HubError):
    """The hub is rate-limiting requests (HTTP 429); try again later."""


class HubServerError(HubError):
    """The hub had a server error (HTTP 5xx); try again later."""


class HubUnreachableError(DownloadError):
    """The hub endpoint could not be reached (no connection, DNS, timeout)."""


class HubOfflineError(DownloadError):
    """Downloads are switched off (``HF_HUB_OFFLINE`` is set)."""


class NotAHubError(DownloadError):
    """The endpoint does not answer like a Hugging Face Hub (no commit or ETag)."""


class ModelPathError(ModelLoadError, GGUFError):
    """The path given as a model is not a readable regular file (missing, a folder, a
    pipe or device, a dangling link); the message says which and what to do.

    Both a load error and a GGUF error, so callers that catch either keep working."""


class WouldFitByDroppingError(ContextOverflowError):
    """The conversation does not fit, and would once earlier messages were dropped: the
    overflow policy is ``stop``. Each front end names its own way to change that."""


class ChatTemplateError(TandemError):
    """A model's chat template failed while rendering a conversation."""


class PromptSetError(TandemError):
    """A benchmark prompt set is missing, unreadable or malformed (the message says where)."""
