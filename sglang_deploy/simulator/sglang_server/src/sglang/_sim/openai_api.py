"""The OpenAI-compatible endpoints, ``/v1/chat/completions`` and
``/v1/completions``: whole answers, or SSE chunks (with
``stream_options.include_usage``, a final usage chunk)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from sglang._sim import request, streaming
from sglang._sim.engine import Plan, sleep_until, token_text
from sglang._sim.http_types import Handler


def chat(h: Handler) -> None:
    _openai(h, chat=True)


def completions(h: Handler) -> None:
    _openai(h, chat=False)


@dataclass
class _Answer:
    """What every object of one answer carries."""

    chat: bool
    rid: str
    model: str
    created: int
    usage: Dict[str, Any]
    send_usage: bool

    @property
    def obj(self) -> str:
        return "chat.completion" if self.chat else "text_completion"


def _openai(h: Handler, chat: bool) -> None:
    arrival = time.monotonic()
    req = request.accept(h)
    if req is None:
        return
    asked = _prompt(h, req, chat)
    if asked is None:
        return
    prompt, max_tokens = asked
    plan = request.plan(h, prompt, max_tokens, bool(req.get("ignore_eos")), arrival, req)
    if plan is None:
        return
    app = h.app
    answer = _Answer(
        chat=chat,
        rid=("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex,
        model=app.faults.model_name(req.get("model") or app.served_name),
        created=int(time.time()),
        usage={
            "prompt_tokens": plan.prompt_tokens,
            "completion_tokens": plan.completion_tokens,
            "total_tokens": plan.prompt_tokens + plan.completion_tokens,
            "prompt_tokens_details": None,
        },
        send_usage=bool(app.cfg.get("usage", True)),
    )
    if not req.get("stream"):
        _answer_whole(h, plan, answer)
        return
    include_usage = answer.send_usage and bool((req.get("stream_options") or {}).get("include_usage"))
    _answer_stream(h, plan, answer, include_usage)


def _prompt(h: Handler, req: Dict[str, Any], chat: bool) -> Optional[Tuple[Any, Any]]:
    """(prompt, max tokens) of the request, or None when a 400 was answered."""
    if chat:
        messages = req.get("messages")
        if not isinstance(messages, list) or not messages:
            h.send_error_json(400, "messages must be a non-empty list")
            return None
        return messages, req.get("max_completion_tokens", req.get("max_tokens"))
    if "prompt" not in req:
        h.send_error_json(400, "prompt is required")
        return None
    return req["prompt"], req.get("max_tokens", 16)


def _answer_whole(h: Handler, plan: Plan, a: _Answer) -> None:
    streaming.run_schedule(h, plan, lambda start, size: None)
    text = "".join(token_text(i) for i in range(plan.completion_tokens))
    if plan.completion_tokens == 0:
        sleep_until(plan.t0)
    if a.chat:
        choice: Dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text, "reasoning_content": None,
                        "tool_calls": None},
            "logprobs": None,
            "finish_reason": plan.finish_reason,
            "matched_stop": None,
        }
    else:
        choice = {"index": 0, "text": text, "logprobs": None,
                  "finish_reason": plan.finish_reason, "matched_stop": None}
    answer = {"id": a.rid, "object": a.obj, "created": a.created, "model": a.model,
              "choices": [choice]}
    if a.send_usage:
        answer["usage"] = a.usage
    h.send_json(200, answer)


def _answer_stream(h: Handler, plan: Plan, a: _Answer, include_usage: bool) -> None:
    chat = a.chat
    base = {"id": a.rid, "object": a.obj + ".chunk" if chat else a.obj, "created": a.created,
            "model": a.model}

    def chunk(choice: Dict[str, Any]) -> Dict[str, Any]:
        c = dict(base, choices=[dict({"index": 0, "logprobs": None}, **choice)])
        if include_usage:
            c["usage"] = None
        return c

    streaming.start_stream(h)
    sent_role = [False]

    def emit(start: int, size: int) -> None:
        text = "".join(token_text(i) for i in range(start, start + size))
        if chat:
            if not sent_role[0]:
                streaming.send_event(h, chunk({"delta": {"role": "assistant", "content": ""},
                                               "finish_reason": None, "matched_stop": None}))
                sent_role[0] = True
            streaming.send_event(h, chunk({"delta": {"content": text}, "finish_reason": None,
                                           "matched_stop": None}))
        else:
            streaming.send_event(h, chunk({"text": text, "finish_reason": None, "matched_stop": None}))

    streaming.run_schedule(h, plan, emit)
    if plan.completion_tokens == 0:
        sleep_until(plan.t0)
    final = {"finish_reason": plan.finish_reason, "matched_stop": None}
    final.update({"delta": {}} if chat else {"text": ""})
    streaming.send_event(h, chunk(final))
    if include_usage:
        streaming.send_event(h, dict(base, choices=[], usage=a.usage))
    streaming.send_event(h, "[DONE]")
    streaming.end_stream(h)
