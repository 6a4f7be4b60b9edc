"""Prefill: how fast the server reads a long prompt (input tok/s), measured after the decode run.

A few requests (``PREFILL_REQUESTS``, after one warm-up) of a long prompt built from the fixed
English text of data/gate_prompts.yaml, one output token each; per request, input tok/s = the
server's ``usage.prompt_tokens`` / TTFT (request sent -> first token). Without usage there is no
count to trust: no figure, a warning.

Every request's prompt differs from its first token on. SGLang caches the KV of every prefix it
has computed in a radix tree and serves a later request's matching prefix from it
(python/sglang/srt/mem_cache/radix_cache.py, ``RadixCache.match_prefix``; on unless
``--disable-radix-cache``): a repeated prompt, or one that shares a long head with an earlier one,
would be measured as a cache hit, not a prefill. So each prompt opens with its own line (an index
and a nonce drawn per gate run, so a second ``check`` against the same running server does not hit
the first one's cache either); only the chat template's few tokens before it can match.

Pure except ``measure_prefill`` (which sends the requests through ``client.py``).
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any, Sequence

import httpx

from sglang_deploy.gate import measure
from sglang_deploy.gate.client import RequestShape, measure_stream
from sglang_deploy.gate.errors import GateError

#: Measured requests after the warm-up; the reported figure is their median.
PREFILL_REQUESTS = 3


def prefill_prompt(texts: Sequence[str], tokens: int, index: int, nonce: str) -> str:
    """About ``tokens`` tokens of English (one per word or punctuation mark, ``measure.estimate_tokens``;
    real tokenizers count a little more: the server's own count is what is reported), opening with
    a line of its own (``index``, ``nonce``) so that no two prompts share a prefix."""
    head = f"Reference {nonce}-{index}. Read the notes below, then answer with one word."
    parts = [head]
    count = measure.estimate_tokens(head)
    i = 0
    while count < tokens and texts:
        text = texts[i % len(texts)]
        parts.append(text)
        count += measure.estimate_tokens(text)
        i += 1
    words = "\n\n".join(parts).split(" ")
    while len(words) > 1 and measure.estimate_tokens(" ".join(words)) > tokens:  # trim the last paragraph
        words.pop()
    return " ".join(words)


def new_nonce() -> str:
    return secrets.token_hex(4)


@dataclass(frozen=True)
class PrefillFigures:
    ttft_s: float
    prompt_tokens: int

    @property
    def tok_s(self) -> float:
        return self.prompt_tokens / self.ttft_s

    def as_dict(self) -> dict[str, Any]:
        return {"ttft_s": round(self.ttft_s, 6), "prompt_tokens": self.prompt_tokens,
                "prefill_tok_s": round(self.tok_s, 3)}


def prefill_figures(t_sent: float, parsed: measure.ParsedStream) -> PrefillFigures | None:
    """One request's figures from its parsed stream; None when the server sent no prompt count.
    The first token arrives with the first content chunk, or (a token whose text is empty) with
    the final chunk."""
    t_first = parsed.events[0][0] if parsed.events else parsed.t_final
    usage = parsed.usage or {}
    prompt = usage.get("prompt_tokens")
    if not isinstance(prompt, int) or isinstance(prompt, bool) or prompt <= 0:
        return None
    if t_first is None or t_first <= t_sent:
        raise GateError("prefill", "the stream carried no first token to time")
    return PrefillFigures(t_first - t_sent, prompt)


def measure_prefill(client: httpx.Client, shape: RequestShape, texts: Sequence[str], tokens: int,
                    warnings: list[str], cancel: threading.Event | None = None,
                    requests: int = PREFILL_REQUESTS, deadline: float | None = None) -> list[PrefillFigures]:
    """A warm-up and ``requests`` measured requests of distinct long prompts, one token each;
    [] (and a warning) when the server sends no prompt count. With ``deadline`` (``perf_counter``),
    a further request is sent only while one as long as the last still ends before it (the warm-up
    and one measured request always are)."""
    nonce = new_nonce()
    out: list[PrefillFigures] = []
    for i in range(requests + 1):
        t_sent, parsed = measure_stream(client, shape, prefill_prompt(texts, tokens, i, nonce), 1, cancel,
                                        step="prefill")
        took = time.perf_counter() - t_sent
        figures = prefill_figures(t_sent, parsed)
        if figures is None:
            warnings.append("the server sent no usage.prompt_tokens: prefill (input tok/s) not measured")
            return []
        if i > 0:  # the first is the warm-up: a new prompt length may compile or capture first
            out.append(figures)
        if out and deadline is not None and time.perf_counter() + took > deadline:
            break
    return out
