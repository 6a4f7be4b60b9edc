"""Secrets out of what the gate prints (pure): the API key given to ``check`` and the
password of a URL never reach the report, its warnings, its errors or the progress lines,
even when a server echoes them back (a server may put the request's ``Authorization``
header into an error body)."""

from __future__ import annotations

import json
from typing import Any, Iterable
from urllib.parse import quote, unquote

MASK = "***"
MIN_SECRET = 3


def _userinfo(url: str) -> str:
    """What stands between ``scheme://`` and the last ``@`` of the host part (parsable or not)."""
    rest = url.partition("://")[2] if "://" in url else url
    netloc = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    return netloc.rpartition("@")[0]


def url_secrets(url: str) -> list[str]:
    """The credentials in ``http://user:pass@host`` (or ``http://token@host``): the whole
    userinfo, the user and the password, as given and percent-decoded."""
    userinfo = _userinfo(url)
    if not userinfo:
        return []
    user, _, password = userinfo.partition(":")
    return [s for s in dict.fromkeys((userinfo, unquote(userinfo), user, unquote(user), password,
                                      unquote(password))) if s]


def redact_url(url: str) -> str:
    """``url`` with its userinfo, if any, replaced by ``***`` (shown in messages and reports)."""
    userinfo = _userinfo(url)
    return url.replace(userinfo + "@", MASK + "@", 1) if userinfo else url


class Scrubber:
    """Replaces every form of the given secrets (as given, JSON-escaped, URL-quoted) by ``***``."""

    def __init__(self, secrets: Iterable[str | None]):
        forms: set[str] = set()
        for s in secrets:
            if not s or len(s) < MIN_SECRET:  # a one- or two-letter "secret" would mask every such text
                continue
            forms.update({s, json.dumps(s)[1:-1], quote(s, safe="")})
        # longest first: a form that contains another is replaced whole
        self.forms = sorted((f for f in forms if f), key=len, reverse=True)

    def text(self, value: str) -> str:
        for form in self.forms:
            if form in value:
                value = value.replace(form, MASK)
        return value

    def deep(self, value: Any) -> Any:
        """``value`` with every string in it (keys included) scrubbed."""
        if not self.forms:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.deep(k): self.deep(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.deep(v) for v in value)
        return value
