"""The state a request handler sees (one ``App`` per process) and the route
table of SGLang's HTTP API."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict

from sglang._sim import config, generate, info_api, openai_api, resolve
from sglang._sim.disagg import Disagg
from sglang._sim.engine import Engine
from sglang._sim.faults import Faults
from sglang._sim.http_types import Handler, Route
from sglang.srt.server_args import ServerArgs


class App:
    """Everything a request handler needs; one per process."""

    def __init__(self, args: ServerArgs, info: Dict[str, Any], cfg: Dict[str, Any], version: str):
        self.args = args
        self.info = info
        self.cfg = cfg
        self.version = version
        self.api_key = getattr(args, "api_key", None)
        self.served_name = info.get("served_model_name") or info.get("model_path")
        self.engine = Engine(info, cfg, resolve.spec_accept_length(info, cfg), config.performance_model(cfg))
        self.faults = Faults(cfg)
        self.ready_at = float("inf")
        self.created = int(time.time())
        self.stopping = threading.Event()
        # --disaggregation-mode prefill|decode (disagg.py); None: both in one server
        self.disagg = Disagg(info, cfg) if info.get("disaggregation_mode") in ("prefill", "decode") else None

    @property
    def ready(self) -> bool:
        return not self.faults.never_ready and time.monotonic() >= self.ready_at

    def server_info(self) -> Dict[str, Any]:
        out = dict(self.info)
        dp = int(self.info.get("dp_size") or 1)
        out["internal_states"] = [self.engine.internal_state() for _ in range(dp)]
        return config.deep_merge(out, self.cfg.get("server_info_overrides") or {})

    def routes(self) -> Dict[str, Route]:
        r: Dict[str, Route] = {
            "/health": (("GET",), info_api.health),
            "/health_generate": (("GET",), info_api.health),
            "/get_server_info": (("GET",), info_api.server_info),
            "/model_info": (("GET",), info_api.model_info),
            "/get_model_info": (("GET",), info_api.model_info),
            "/v1/models": (("GET",), info_api.models),
            "/v1/completions": (("POST",), self._counted(openai_api.completions)),
            "/v1/chat/completions": (("POST",), self._counted(openai_api.chat)),
            "/generate": (("POST",), self._counted(generate.generate)),
        }
        if resolve.feature("server_info_path", self.version, self.cfg):
            r["/server_info"] = (("GET",), info_api.server_info)
        if self.info.get("enable_metrics"):
            r["/metrics"] = (("GET",), info_api.metrics)
        return r

    def _counted(self, endpoint: Callable[[Handler], None]) -> Callable[[Handler], None]:
        """``endpoint`` counted in ``/metrics``' sglang:num_running_reqs while it answers."""
        def counted(h: Handler) -> None:
            with self.engine.stats.in_flight():
                endpoint(h)
        return counted

    def intercept(self, handler: Handler, method: str, path: str) -> bool:
        """Extension point for later simulated behaviours: return True when the
        request was answered here.  Nothing is intercepted here; the faults of
        ``faults.py`` act inside the endpoints they change."""
        return False
