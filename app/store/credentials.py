"""API keys of remote servers, kept in the OS keyring (never in settings or logs).

Through the ``keyring`` library: the Secret Service (GNOME Keyring, KWallet) on Linux,
the Keychain on macOS, the Credential Locker on Windows. One entry per server address,
under the service name :data:`SERVICE`. A machine without a keyring backend (a bare
Linux without a Secret Service, a CI runner) cannot keep a key between runs: then
:meth:`ApiKeyStore.save` keeps it in memory for this session only and says so, and
:attr:`ApiKeyStore.backend_note` gives the sentence to show.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

#: the keyring service name the keys are stored under (one username per server address)
SERVICE = "Tandem remote servers"


def keyring_backend_name() -> str | None:
    """The keyring backend in use (``SecretService Keyring``…), None when there is no
    usable one (``keyring``'s fail backend, or the library cannot load)."""
    try:
        import keyring
        from keyring.backends import fail
    except Exception:  # an unusable keyring install is "no keyring"
        return None
    backend = keyring.get_keyring()
    if isinstance(backend, fail.Keyring):
        return None
    return str(getattr(backend, "name", type(backend).__name__))


class ApiKeyStore:
    """Where API keys live: the OS keyring, else memory for this session.

    Keys are indexed by the server's base URL. Nothing here logs a key.
    """

    def __init__(self) -> None:
        self._session: dict[str, str] = {}

    @property
    def persistent(self) -> bool:
        """Whether keys outlive this session (a keyring backend is there)."""
        return keyring_backend_name() is not None

    @property
    def backend_note(self) -> str:
        """One sentence about where a key goes, for the connect dialog."""
        name = keyring_backend_name()
        if name is None:
            return ("This system has no keyring (no Secret Service, Keychain or Credential "
                    "Locker): the API key is kept for this session only.")
        return f"The API key is kept in the system keyring ({name})."

    def save(self, base_url: str, key: str) -> bool:
        """Keep ``key`` for ``base_url``. Returns True when it went into the keyring,
        False when it is kept for this session only (no backend, or the keyring
        refused: locked, denied)."""
        self._session[base_url] = key
        if keyring_backend_name() is None:
            return False
        import keyring
        from keyring.errors import KeyringError

        try:
            keyring.set_password(SERVICE, base_url, key)
        except KeyringError as exc:
            log.warning("the keyring did not take the API key for %s: %s",
                        base_url, type(exc).__name__)
            return False
        return True

    def load(self, base_url: str) -> str | None:
        """The key for ``base_url``: this session's, else the keyring's; None if none."""
        if base_url in self._session:
            return self._session[base_url]
        if keyring_backend_name() is None:
            return None
        import keyring
        from keyring.errors import KeyringError

        try:
            return keyring.get_password(SERVICE, base_url)
        except KeyringError as exc:
            log.warning("the keyring could not be read for %s: %s", base_url,
                        type(exc).__name__)
            return None

    def delete(self, base_url: str) -> None:
        """Forget the key for ``base_url`` (session and keyring)."""
        self._session.pop(base_url, None)
        if keyring_backend_name() is None:
            return
        import keyring
        from keyring.errors import KeyringError, PasswordDeleteError

        try:
            keyring.delete_password(SERVICE, base_url)
        except PasswordDeleteError:
            pass
        except KeyringError as exc:
            log.warning("the keyring could not forget the key for %s: %s", base_url,
                        type(exc).__name__)
