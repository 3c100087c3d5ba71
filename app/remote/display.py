"""What Tandem shows of a server's address and of its error pages.

An address may carry a password (``http://user:pass@host``) that must not reach a
message or a log: :func:`redact_url` hides it (what a server sends is escaped by
:func:`app.formatting.printable`). A proxy in front of a server answers errors with an
HTML page: :func:`page_text` gives its words. No Qt, no httpx: pure text functions.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urlsplit


class _PageWords(HTMLParser):
    """The text of an HTML page outside ``<script>``, ``<style>`` and ``<head>``
    (whose ``<title>`` the body repeats on the pages proxies and servers send)."""

    _SKIPPED = frozenset({"script", "style", "head"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.words: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIPPED:
            self._skipping += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIPPED and self._skipping:
            self._skipping -= 1

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self.words.extend(data.split())


def looks_like_html(text: str) -> bool:
    """Whether ``text`` starts as an HTML document or element does (after whitespace)."""
    return re.match(r"\s*<(!doctype\s+html|html|head|body|title|h1|p)\b", text, re.I) is not None


def page_text(html: str, limit: int = 200) -> str:
    """The words of an HTML error page, one space apart, at most ``limit`` characters
    ("502 Bad Gateway nginx/1.24.0"); "" for a page without text. Markup that does not
    parse is read as far as it goes (``html.parser`` never raises on bad markup)."""
    parser = _PageWords()
    parser.feed(html[:100_000])
    parser.close()
    return " ".join(parser.words)[:limit]

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
