"""Secrets out of what the gate prints (pure): the API key given to ``check`` and the
password of a URL never reach the report, its warnings, its errors or the progress lines,
even when a server echoes them back (a server may put the request's ``Authorization``
header into an error body)."""

from __future__ import annotations

import json
from typing import Any, Iterable
from urllib.parse import quote, urlsplit

MASK = "***"


def url_secrets(url: str) -> list[str]:
    """The password (and a user name given with it) in ``http://user:pass@host``."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return []
    return [password] if password else []


def without_userinfo_secret(url: str) -> str:
    """``url`` with the password of its userinfo masked (shown in the report)."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    if not password:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"{user}:{MASK}@{host}").geturl()


class Scrubber:
    """Replaces every form of the given secrets (as given, JSON-escaped, URL-quoted) by ``***``."""

    def __init__(self, secrets: Iterable[str | None]):
        forms: set[str] = set()
        for s in secrets:
            if not s:
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
