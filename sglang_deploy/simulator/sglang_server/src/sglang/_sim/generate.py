"""SGLang's native ``/generate`` (text in, text out; no token ids): a whole
answer, or SSE events that each carry the text so far."""

from __future__ import annotations

import time
import uuid
from typing import Any, Dict

from sglang._sim import request, streaming
from sglang._sim.engine import token_text
from sglang._sim.http_types import Handler


def generate(h: Handler) -> None:
    arrival = time.monotonic()
    req = request.accept(h)
    if req is None:
        return
    params = req.get("sampling_params") or {}
    prompt = req.get("text", req.get("input_ids", ""))
    plan = request.plan(h, prompt, params.get("max_new_tokens", 128),
                        bool(params.get("ignore_eos")), arrival, req)
    if plan is None:
        return
    rid = uuid.uuid4().hex

    def meta(done: int, finished: bool) -> Dict[str, Any]:
        return {
            "id": rid,
            "finish_reason": ({"type": plan.finish_reason, "length": done}
                              if finished and plan.finish_reason == "length"
                              else {"type": plan.finish_reason} if finished else None),
            "prompt_tokens": plan.prompt_tokens,
            "completion_tokens": done,
        }

    if not req.get("stream"):
        streaming.run_schedule(h, plan, lambda s, n: None)
        text = "".join(token_text(i) for i in range(plan.completion_tokens))
        h.send_json(200, {"text": text, "meta_info": meta(plan.completion_tokens, True)})
        return
    streaming.start_stream(h)
    total = len(plan.chunks)
    done_chunks = [0]

    def emit(start: int, size: int) -> None:
        done_chunks[0] += 1
        end = start + size
        text = "".join(token_text(i) for i in range(end))
        streaming.send_event(h, {"text": text, "meta_info": meta(end, done_chunks[0] == total)})

    streaming.run_schedule(h, plan, emit)
    streaming.send_event(h, "[DONE]")
    streaming.end_stream(h)
