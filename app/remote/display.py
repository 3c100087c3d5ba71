"""What Tandem shows of what a server sent, and of a server's address.

Anything a server sends may carry terminal control sequences (ESC, OSC, NUL…) that
would retitle, clear or rewrite the user's terminal if printed as they are; and an
address may carry a password (``http://user:pass@host``) that must not reach a message
or a log. :func:`printable` escapes the first, :func:`redact_url` hides the second. No
Qt, no httpx: pure text functions.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

#: control characters (Unicode category Cc: C0, DEL, C1) other than newline and tab
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_NAMED = {"\r": "\\r", "\x0b": "\\v", "\x0c": "\\f"}


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    return _NAMED.get(ch) or f"\\x{ord(ch):02x}"


def printable(text: str) -> str:
    """``text`` with every control character except newline and tab written as a
    backslash escape (ESC as ``\\x1b``, CR as ``\\r``, C1's CSI as ``\\x9b``), so that it
    shows as text on a terminal instead of acting on it. Other characters are kept."""
    return _CONTROL.sub(_escape, text)


def redact_url(url: str) -> str:
    """``url`` with the password of its user part shown as ``***``
    (``http://user:***@host:port/path``); a user without a password keeps its name, an
    address without a user part is returned as given. An address that does not parse
    (``http://user:pass@[::1``) or has no scheme is redacted as text
    (:func:`redact_userinfo`)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact_userinfo(url)
    if not parts.scheme or not parts.netloc:
        return redact_userinfo(url)
    if "@" not in parts.netloc:
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    user, colon, _password = userinfo.partition(":")
    shown = f"{user}:***" if colon else user
    return parts._replace(netloc=f"{shown}@{host}").geturl()


_USERINFO = re.compile(r"(?P<head>(?:^|://)[^/?#@:\s]*:)[^/?#\s]+@")


def redact_userinfo(text: str) -> str:
    """``text`` (a command line, a message) with the password of every
    ``scheme://user:password@`` in it, and of a ``user:password@`` it starts with, shown
    as ``***`` (a password with a raw ``@`` in it included)."""
    return _USERINFO.sub(r"\g<head>***@", text)


def url_password(url: str) -> str | None:
    """The password of ``url``'s user part, as written there (percent-encoded as typed);
    None when it has none or does not parse."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    userinfo, at, _host = parts.netloc.rpartition("@")
    if not at:
        return None
    _user, colon, password = userinfo.partition(":")
    return password if colon and password else None
