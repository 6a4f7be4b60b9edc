"""Model loading, simulated: the server reads its "weights" from ``--model-path`` before it binds.

As SGLang resolves ``--model-path`` (sglang/srt/utils/hf_transformers_utils.py, get_config via
transformers' AutoConfig.from_pretrained, then the weight loader's glob of ``*.safetensors``):

- a local directory: its files are read, at ``weights_read_mb_s`` (null: as fast as the disk
  goes); a directory without ``config.json`` is refused as transformers refuses it;
- a Hub id with ``HF_HUB_OFFLINE=1``: only the local cache could serve it, and the simulator
  has none, so the start fails with the error transformers raises offline;
- a Hub id otherwise: real SGLang downloads it at start. With ``download_at_start`` true the
  simulator does too, from ``$HF_ENDPOINT`` (the Hub's model info and resolve URLs), reading
  every byte; otherwise it is accepted as before, with a log line.

With ``stall_in: "load"`` in the behaviour file the load hangs until the server is stopped (then exit
0): the files are read, or the Hub id logged, and "Load weight end" never comes.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import urllib.request
from typing import Any, Dict, Iterable, Optional

from sglang._sim.console import log

CHUNK = 1 << 20


def _offline() -> bool:
    # huggingface_hub.constants: HF_HUB_OFFLINE is true for "1", "ON", "YES", "TRUE" (any case).
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")


def _throttled(chunks: Iterable[bytes], rate_mb_s: Optional[float], stop: threading.Event) -> Optional[int]:
    """Consume ``chunks`` no faster than ``rate_mb_s``; the bytes read, or None when stopped."""
    total, t0 = 0, time.monotonic()
    for block in chunks:
        total += len(block)
        if rate_mb_s:
            due = t0 + total / (rate_mb_s * 1e6)
            if stop.wait(max(0.0, due - time.monotonic())):
                return None
        elif stop.is_set():
            return None
    return total


def _file_chunks(path: str) -> Iterable[bytes]:
    with open(path, "rb") as fh:
        while True:
            block = fh.read(CHUNK)
            if not block:
                return
            yield block


def _read_dir(path: str, rate: Optional[float], stop: threading.Event) -> Optional[int]:
    names = sorted(os.path.join(root, f) for root, _, files in os.walk(path, followlinks=True) for f in files)
    total = 0
    for name in names:
        n = _throttled(_file_chunks(name), rate, stop)
        if n is None:
            return None
        total += n
    return total


def _download(model: str, cfg: Dict[str, Any], stop: threading.Event) -> Optional[int]:
    endpoint = (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
    revision = cfg.get("download_revision") or "main"
    headers = {"Authorization": f"Bearer {os.environ['HF_TOKEN']}"} if os.environ.get("HF_TOKEN") else {}

    def get(url: str):
        return urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60)

    with get(f"{endpoint}/api/models/{model}/revision/{revision}") as resp:
        names = [s["rfilename"] for s in json.loads(resp.read()).get("siblings", [])]
    total = 0
    for name in names:
        with get(f"{endpoint}/{model}/resolve/{revision}/{name}") as resp:
            n = _throttled(iter(lambda: resp.read(CHUNK), b""), None, stop)
        if n is None:
            return None
        total += n
    return total


def _stall(stop: threading.Event) -> int:
    """``stall_in: "load"``: hang until stopped, then 0 (a stopped start)."""
    while not stop.wait(1.0):
        pass
    log("Received a stop signal while loading weights")
    return 0


def load(model_path: str, cfg: Dict[str, Any], stop: threading.Event) -> Optional[int]:
    """None when the weights were read (or the start is accepted without them), 0 when stopped
    while loading, 1 when the start fails (the reason on stderr, as SGLang prints it)."""
    rate = cfg.get("weights_read_mb_s")
    t0 = time.monotonic()
    if os.path.isdir(model_path):
        if not os.path.isfile(os.path.join(model_path, "config.json")):
            print(f"OSError: {model_path} does not appear to have a file named config.json. (SIMULATED)",
                  file=sys.stderr, flush=True)
            return 1
        log(f"Load weight begin: {model_path}" + (f" at {rate:g} MB/s" if rate else ""))
        n = _read_dir(model_path, rate, stop)
    elif _offline():
        # transformers/utils/hub.py, cached_files: the message it raises when the file is neither
        # in the cache nor reachable.
        print(f"OSError: We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find "
              f"them in the cached files. Check your internet connection or see how to run the library in "
              f"offline mode. ({model_path!r} with HF_HUB_OFFLINE=1; SIMULATED)", file=sys.stderr, flush=True)
        return 1
    elif cfg.get("download_at_start"):
        log(f"Downloading {model_path} from {os.environ.get('HF_ENDPOINT') or 'the Hub'} at start")
        try:
            n = _download(model_path, cfg, stop)
        except OSError as exc:
            print(f"OSError: cannot download {model_path}: {exc} (SIMULATED)", file=sys.stderr, flush=True)
            return 1
    else:
        log(f"{model_path} is not a local directory: SGLang would download it now (not simulated)")
        return _stall(stop) if cfg.get("stall_in") == "load" else None
    if n is not None and cfg.get("stall_in") == "load":
        return _stall(stop)
    if n is None:
        log("Received a stop signal while loading weights")
        return 0
    log(f"Load weight end. {n} bytes in {time.monotonic() - t0:.2f} s (simulated)")
    return None
