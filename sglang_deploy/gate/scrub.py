"""Secrets out of what the gate prints (pure): the API key given to ``check`` and the
password of a URL never reach the report, its warnings, its errors or the progress lines,
even when a server echoes them back (a server may put the request's ``Authorization``
header into an error body). One implementation serves every output of the tool:
``sglang_deploy.untrusted``."""

from __future__ import annotations

from sglang_deploy.untrusted import MASK, MIN_SECRET, Scrubber, redact_url, url_secrets

__all__ = ["MASK", "MIN_SECRET", "Scrubber", "redact_url", "url_secrets"]
