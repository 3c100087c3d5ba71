"""What Tandem shows of a server's address.

An address may carry a password (``http://user:pass@host``) that must not reach a
message or a log: :func:`redact_url` hides it (what a server sends is escaped by
:func:`app.formatting.printable`). No Qt, no httpx: pure text functions.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

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
