"""Prefill/decode disaggregation, SIMULATED at the boundaries the gateway and the deploy meet
(``--disaggregation-mode prefill|decode``). Not SGLang: no KV cache moves.

What is SGLang's (the released 0.5.23 wheel):
* At start, the transfer engine is imported: ``mooncake.engine`` for ``mooncake`` and
  ``mooncake_tcp`` (``srt/distributed/device_communicators/mooncake_transfer_engine.py``,
  ``MooncakeTransferEngine.__init__``: an ImportError "Please install mooncake ..."), ``nixl._api``
  for ``nixl`` (``srt/disaggregation/nixl/conn.py``, ``NixlKVManager``). Without it the server does not start.
* A prefill server runs a bootstrap server on ``--disaggregation-bootstrap-port``
  (``srt/disaggregation/common/conn.py``, ``CommonKVBootstrapServer``): ``GET /health`` answers
  "OK"; ``GET /route`` with ``prefill_dp_rank``, ``prefill_cp_rank``, ``target_tp_rank`` and
  ``target_pp_rank`` all -1 answers the server's ``PrefillServerInfo`` (its page size and KV cache
  dtype among the fields); with an input missing, 400 "Missing inputs for bootstrap server.".
* A disaggregated server refuses a generation request without ``bootstrap_room``: 400 "Invalid
  request: Disaggregated request received without bootstrap room id." (``srt/managers/scheduler.py``);
  one whose ``bootstrap_host`` is ``FAKE_BOOTSTRAP_HOST`` (2.2.2.2, ``srt/disaggregation/utils.py``:
  SGLang's own warm-up and health requests) runs without a transfer.
* A prefill server answers after the prefill, with one output token (the rest is the decode
  server's).
* A decode server fetches a prefill server's info once per bootstrap address and refuses one of
  another page size or KV cache dtype (``CommonKVManager.try_ensure_parallel_info``: a RuntimeError
  in its scheduler, which ends the server); here the message goes to stderr and the process exits 1.

What is simulated: the transfer itself (Mooncake or NIXL over RDMA, ZMQ for control) is one long
poll of ``GET /_sim/kv/<room>`` on the prefill server's bootstrap port, answered once that room's
prefill is done (404 after ``pd_transfer_timeout_s``): not a route SGLang has.
"""

from __future__ import annotations

import importlib
import json
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Dict, Optional, Tuple
from urllib.parse import parse_qs, urlsplit

from sglang._sim.http_types import Handler, Route

FAKE_BOOTSTRAP_HOST = "2.2.2.2"
ENGINE_MODULES = {"mooncake": "mooncake.engine", "mooncake_tcp": "mooncake.engine", "nixl": "nixl._api"}
ENGINE_HINTS = {
    "mooncake.engine": "Please install mooncake by following the instructions at "
                       "https://kvcache-ai.github.io/Mooncake/getting_started/build.html to run SGLang with "
                       "MooncakeTransferEngine.",
    "nixl._api": "Please install NIXL by following the instructions at "
                 "https://github.com/ai-dynamo/nixl/blob/main/README.md to run SGLang with NixlTransferEngine.",
}
NO_ROOM = "Invalid request: Disaggregated request received without bootstrap room id."
ROOM_KEEP_S = 600.0  # how long a finished prefill's room is kept for its decode server


class Disagg:
    """One server's role: ``prefill`` or ``decode``."""

    def __init__(self, info: Dict[str, Any], cfg: Dict[str, Any]):
        self.mode = str(info.get("disaggregation_mode"))
        self.backend = str(info.get("disaggregation_transfer_backend") or "mooncake")
        self.bootstrap_port = int(info.get("disaggregation_bootstrap_port") or 8998)
        self.host = str(info.get("host") or "127.0.0.1")
        self.http_port = int(info.get("port") or 30000)
        self.page_size = int(info.get("page_size") or 1)
        self.kv_cache_dtype = str(info.get("kv_cache_dtype") or "auto")
        self.tp_size = int(info.get("tp_size") or 1)
        self.dp_size = int(info.get("dp_size") or 1)
        self.timeout_s = float(cfg.get("pd_transfer_timeout_s", 30.0))
        self.rooms: Dict[int, Tuple[float, float]] = {}  # room -> (due, when recorded), monotonic
        self.cond = threading.Condition()
        self.known: Dict[str, Dict[str, Any]] = {}  # bootstrap address -> its PrefillServerInfo
        self.fatal: Optional[str] = None  # a decode server's refusal of a prefill server: it ends

    # ---- start ---------------------------------------------------------------------------------

    def engine_missing(self) -> Optional[str]:
        """SGLang's ImportError when the backend's transfer engine is not importable, else None."""
        module = ENGINE_MODULES.get(self.backend)
        if module is None:
            return None
        try:
            importlib.import_module(module)
        except ImportError as e:
            return f"ImportError: {ENGINE_HINTS[module]} ({e})"
        return None

    def bootstrap_app(self) -> "BootstrapApp":
        return BootstrapApp(self)

    # ---- requests --------------------------------------------------------------------------------

    def admit(self, h: Handler, req: Dict[str, Any]) -> bool:
        """Before a generation request is planned: False when an answer was sent (no room, a failed
        transfer). A decode server waits here for its prefill server's transfer."""
        room = req.get("bootstrap_room")
        if room is None:
            h.send_error_json(400, NO_ROOM)
            return False
        if isinstance(room, bool) or not isinstance(room, int):
            h.send_error_json(400, f"bootstrap_room must be an integer, got {room!r}")
            return False
        if self.mode != "decode" or req.get("bootstrap_host") == FAKE_BOOTSTRAP_HOST:
            return True
        addr = f"{req.get('bootstrap_host')}:{req.get('bootstrap_port')}"
        problem = self._ensure_info(addr)
        if problem is None:
            problem = self._wait_transfer(addr, room)
        if problem is not None:
            h.send_error_json(500, problem, "InternalServerError")
            return False
        return True

    def planned(self, req: Dict[str, Any], due: float) -> None:
        """A prefill server's request is planned: its KV cache is ready for the decode server at ``due``."""
        if self.mode != "prefill" or req.get("bootstrap_host") == FAKE_BOOTSTRAP_HOST:
            return
        now = time.monotonic()
        with self.cond:
            for old in [r for r, (_, t) in self.rooms.items() if now - t > ROOM_KEEP_S]:
                del self.rooms[old]
            self.rooms[int(req["bootstrap_room"])] = (due, now)
            self.cond.notify_all()

    def max_tokens(self, asked: Any) -> Any:
        """A prefill server answers one token whatever was asked."""
        if self.mode == "prefill" and isinstance(asked, int) and not isinstance(asked, bool) and asked > 1:
            return 1
        if self.mode == "prefill" and asked is None:
            return 1
        return asked

    def _ensure_info(self, addr: str) -> Optional[str]:
        if addr in self.known:
            return None
        url = (f"http://{addr}/route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1"
               f"&target_pp_rank=-1")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                info = json.loads(r.read(65536))
        except (OSError, ValueError, urllib.error.URLError) as e:
            return f"Error fetching prefill server info from bootstrap: {e}"
        if info.get("page_size") is not None and int(info["page_size"]) != self.page_size:
            self._die(f"Page size mismatch: prefill server has page_size={info['page_size']}, but decode server has "
                      f"page_size={self.page_size}. Both servers must use the same --page-size value.")
            return "Page size mismatch"
        if info.get("kv_cache_dtype") is not None and info["kv_cache_dtype"] != self.kv_cache_dtype:
            self._die(f"KV cache dtype mismatch: prefill server has kv_cache_dtype={info['kv_cache_dtype']}, but "
                      f"decode server has kv_cache_dtype={self.kv_cache_dtype}. Both servers must use the same "
                      "--kv-cache-dtype value.")
            return "KV cache dtype mismatch"
        self.known[addr] = info
        return None

    def _die(self, message: str) -> None:
        print(f"RuntimeError: {message}", file=sys.stderr, flush=True)
        self.fatal = message

    def _wait_transfer(self, addr: str, room: int) -> Optional[str]:
        """The simulated KV transfer: a long poll of the prefill server's room (not SGLang's protocol)."""
        try:
            with urllib.request.urlopen(f"http://{addr}/_sim/kv/{room}", timeout=self.timeout_s + 5) as r:
                r.read(1024)
            return None
        except (OSError, urllib.error.URLError) as e:
            return f"KV transfer of bootstrap room {room} from {addr} failed (simulated transfer): {e}"

    # ---- the prefill server's bootstrap server ----------------------------------------------------

    def route_info(self) -> Dict[str, Any]:
        """0.5.23's PrefillServerInfo as ``GET /route`` with the four -1 ranks answers it."""
        return {"attn_tp_size": self.tp_size, "attn_cp_size": 1, "dp_size": self.dp_size, "pp_size": 1,
                "page_size": self.page_size, "kv_cache_dtype": self.kv_cache_dtype, "follow_bootstrap_room": True,
                "enable_dsa_cache_layer_split": False, "decode_allocation_policy": "early",
                "enable_kv_cache_sharding": False, "prefill_http_port": self.http_port, "target_tp_rank": None,
                "target_tp_ranks": None, "target_cp_ranks": None, "target_pp_ranks": None,
                "required_dst_info_num": None, "required_prefill_response_num": None}

    def wait_room(self, room: int) -> bool:
        deadline = time.monotonic() + self.timeout_s
        with self.cond:
            while True:
                entry = self.rooms.get(room)
                now = time.monotonic()
                if entry is not None and entry[0] <= now:
                    return True
                if now >= deadline:
                    return False
                wake = min(deadline, entry[0]) if entry is not None else deadline
                self.cond.wait(max(0.001, min(0.25, wake - now)))


class BootstrapApp:
    """The prefill server's bootstrap server, as ``httpd.Server`` serves it."""

    api_key = None

    def __init__(self, pd: Disagg):
        self.pd = pd

    def intercept(self, h: Handler, method: str, path: str) -> bool:
        if method == "GET" and path.startswith("/_sim/kv/"):
            room = path[len("/_sim/kv/"):]
            if not room.isdigit() or len(room) > 20:
                h.send_json(400, {"detail": "not a room"})
            elif self.pd.wait_room(int(room)):
                h.send_json(200, {"room": int(room), "simulated": True})
            else:
                h.send_json(404, {"detail": f"no prefill of room {room} within {self.pd.timeout_s:g} s"})
            return True
        return False

    def routes(self) -> Dict[str, Route]:
        return {"/health": (("GET",), lambda h: _text(h, 200, "OK")),
                "/route": (("GET",), self._route)}

    def _route(self, h: Handler) -> None:
        query = parse_qs(urlsplit(getattr(h, "path", "")).query)
        names = ("prefill_dp_rank", "prefill_cp_rank", "target_tp_rank", "target_pp_rank")
        values = [query.get(n, [""])[0] for n in names]
        if not all(values):
            _text(h, 400, "Missing inputs for bootstrap server.")
        elif all(v == "-1" for v in values):
            h.send_json(200, self.pd.route_info())
        else:  # one rank's ZMQ endpoint: the simulated transfer needs none
            h.send_json(200, {"rank_ip": self.pd.host, "rank_port": 0})


def _text(h: Handler, status: int, text: str) -> None:
    body = text.encode()
    h.send_response(status)
    h.send_header("Content-Type", "text/plain; charset=utf-8")
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)
