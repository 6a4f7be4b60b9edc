"""The simulated server's log lines on stdout (uvicorn/SGLang-like time stamps)."""

from __future__ import annotations

import time


def log(msg: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp}] {msg}", flush=True)
