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
    if h.app.disagg is not None and not h.app.disagg.admit(h, req):
        return None  # no bootstrap room, or (a decode server) the prefill's transfer failed
    return req


def plan(h: Handler, prompt: Any, max_tokens: Any, ignore_eos: bool,
         arrival: float, req: Optional[Dict[str, Any]] = None) -> Optional[Plan]:
    """The request's timeline, or None when a 400 was answered. A prefill server's is one token,
    whose KV cache its decode server may fetch once it is due (``req``: the request, disagg.py)."""
    engine, faults, pd = h.app.engine, h.app.faults, h.app.disagg
    if pd is not None:
        max_tokens = pd.max_tokens(max_tokens)
    try:
        out = engine.plan(engine.count_prompt_tokens(prompt), max_tokens, ignore_eos, arrival,
                          extra_ttft=faults.extra_ttft, stall=faults.stall())
    except RequestError as e:
        h.send_error_json(400, str(e))
        return None
    if pd is not None and req is not None:
        pd.planned(req, out.t0)
    return out
