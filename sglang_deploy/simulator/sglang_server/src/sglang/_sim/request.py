"""The checks every generation request goes through before it is planned:
readiness (503), a JSON object body (400), the 500 faults; then its plan
(400 when the prompt plus max tokens does not fit)."""

from __future__ import annotations

import json
from typing import Any, Dict, Optional

from sglang._sim.engine import Plan, RequestError
from sglang._sim.http_types import Handler


def accept(h: Handler) -> Optional[Dict[str, Any]]:
    """The request's JSON object, or None when an error was answered."""
    if not h.app.ready:
        h.send_error_json(503, "The server is starting (loading the model).",
                          "ServiceUnavailableError")
        return None
    try:
        req = json.loads(h.body or b"{}")
    except ValueError as e:
        h.send_error_json(400, f"invalid JSON body: {e}")
        return None
    if not isinstance(req, dict):
        h.send_error_json(400, "the request body must be a JSON object")
        return None
    failure = h.app.faults.http_500()
    if failure:
        h.send_error_json(500, failure, "InternalServerError")
        return None
    return req


def plan(h: Handler, prompt: Any, max_tokens: Any, ignore_eos: bool,
         arrival: float) -> Optional[Plan]:
    """The request's timeline, or None when a 400 was answered."""
    engine, faults = h.app.engine, h.app.faults
    try:
        return engine.plan(engine.count_prompt_tokens(prompt), max_tokens, ignore_eos, arrival,
                           extra_ttft=faults.extra_ttft, stall=faults.stall())
    except RequestError as e:
        h.send_error_json(400, str(e))
        return None
