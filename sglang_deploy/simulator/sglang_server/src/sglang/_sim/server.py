"""``python -m sglang.launch_server``: the SIMULATED SGLang server.

Parses its argv with the version's parser (argparse exits 2 on a refused
argv), prints the parsed arguments (secrets redacted), starts one child per
TP rank beyond 0, and serves SGLang's HTTP API with
``http.server.ThreadingHTTPServer`` until SIGTERM/SIGINT (then exit 0).

The API itself: ``app.py`` (state, routes), ``httpd.py`` (server, handler),
``info_api.py``, ``openai_api.py``, ``generate.py`` (endpoints),
``request.py`` and ``streaming.py`` (what the generation endpoints share);
a follower node of a multi-node instance: ``follower.py``.

The start logs the lines that end its phases as the real releases do (startcache.py: "Load weight
end", "Memory pool end", the CUDA graph capture's end, "The server is fired up and ready to roll!"),
and with ``stall_in`` hangs in one of them.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any, Dict, List, Optional

import sglang
from sglang._sim import catalog, config, follower, multinode, resolve, startcache, weights
from sglang._sim.app import App
from sglang._sim.console import log
from sglang._sim.disagg import Disagg
from sglang._sim.faults import Faults
from sglang._sim.httpd import Server
from sglang._sim.workers import TPWorkers, local_ranks
from sglang.srt.server_args import ServerArgs, prepare_server_args


def main(argv: List[str]) -> int:
    try:
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[attr-defined]
    except (AttributeError, ValueError):
        pass
    version = sglang.__version__
    args = prepare_server_args(argv)  # argparse: exit 2 on a refused argv
    try:
        cfg, cfg_path, unknown = config.load()
    except config.ConfigError as e:
        print(f"sglang (simulated): {e}", file=sys.stderr, flush=True)
        return 1
    faults = Faults(cfg)
    model = config.performance_model(cfg)
    log(f"SIMULATED SGLang {version}: a stand-in at the parser and HTTP boundaries; no model "
        f"is loaded. Behaviour from {cfg_path or 'built-in defaults'}"
        + (f" (keys it does not know: {', '.join(unknown)})" if unknown else "")
        + f"; {config.describe(cfg)}")
    log("server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in args.redacted().items())
        + ")")
    data = catalog.load()
    info = resolve.server_info(args, version, cfg, list(argv), resolve.secret_option_strings(data))
    errors = resolve.startup_errors(info, version, cfg)
    if errors:
        print(f"ValueError: {errors[0]}", file=sys.stderr, flush=True)
        return 1
    if model is not None and model.crash_after_s(info) is not None:
        faults.plant_crash(float(model.crash_after_s(info)), model.crash_message(info))
    crash_at = faults.crash_at()

    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    loaded = weights.load(str(info.get("model_path")), cfg, stop)
    if loaded is not None:
        return loaded

    failure = model.startup_failure(info) if model is not None else None
    if failure:
        return _fail_start(failure, cfg, stop)

    nnodes, node_rank = int(info.get("nnodes") or 1), int(info.get("node_rank") or 0)
    if nnodes > 1 and node_rank > 0:
        return follower.run(info, cfg, faults, crash_at, stop, nnodes, node_rank)
    return _serve(args, info, cfg, version, faults, crash_at, stop, nnodes, node_rank)


def _fail_start(message: str, cfg: Dict[str, Any], stop: threading.Event) -> int:
    """The performance model says this config cannot start (an OOM at CUDA graph capture,
    too little memory for the KV cache, a planted crash at start): SGLang gets that far
    into its start-up, never serves, prints the error and exits 1."""
    if stop.wait(float(cfg["listen_delay_s"]) + float(cfg["startup_delay_s"])):
        return 0
    print(message, file=sys.stderr, flush=True)
    return 1


def _serve(args: ServerArgs, info: Dict[str, Any], cfg: Dict[str, Any], version: str, faults: Faults,
           crash_at: float, stop: threading.Event, nnodes: int, node_rank: int) -> int:
    """The node that serves the HTTP API: a single-node instance, or rank 0 of several nodes
    (then also the rendezvous that the followers join)."""
    app = App(args, info, cfg, version)
    app.faults = faults
    leader: Optional[multinode.Leader] = None
    if nnodes > 1:
        leader = multinode.Leader(str(info.get("dist_init_addr")), nnodes)
        try:
            leader.listen()
        except multinode.RendezvousError as e:
            print(str(e), file=sys.stderr, flush=True)
            return 1
        log(f"Rendezvous (simulated torch.distributed store) on port {leader.port}: waiting for "
            f"{nnodes - 1} follower node(s)")
    rendezvous_deadline = time.monotonic() + float(cfg["dist_init_timeout_s"])
    workers = TPWorkers.spawn_ranks(local_ranks(info, nnodes, node_rank))
    return _Rank0(app, leader, workers, crash_at, stop, nnodes, rendezvous_deadline).run()


#: A TP worker found dead is the server's failure unless the stop signal comes within this: systemd
#: sends SIGTERM to every process of the unit at once (KillMode=control-group), and a child can end
#: before the parent's handler has run.
STOP_GRACE_S = 1.0


class _Rank0:
    """The serving node's life: wait out ``listen_delay_s``, bind, then watch for a stop,
    a crash fault, a lost follower, a rendezvous time-out or a dead TP worker, and log the end of
    each start phase of the readiness wait when its time comes (startcache.py)."""

    def __init__(self, app: App, leader: Optional[multinode.Leader], workers: TPWorkers, crash_at: float,
                 stop: threading.Event, nnodes: int, rendezvous_deadline: float):
        self.app, self.leader, self.workers = app, leader, workers
        self.cfg, self.info, self.faults = app.cfg, app.info, app.faults
        self.crash_at, self.stop, self.nnodes = crash_at, stop, nnodes
        self.rendezvous_deadline = rendezvous_deadline
        self.httpd: Optional[Server] = None
        self.bootstrap: Optional[Server] = None  # a prefill server's bootstrap server (disagg.py)
        # The start model (startcache.py): a cold compile cache delays readiness; the marker once ready.
        self.cold_s, self.cache_marker, cache_line = startcache.start_delay(self.cfg, os.environ, app.version,
                                                                            self.info)
        if cache_line:
            log(cache_line)
        self.stall_in: Optional[str] = self.cfg.get("stall_in")
        # The readiness wait (monotonic): when it began and when /health answers 200, inf until it
        # began. app.ready_at is the same time, or inf forever when the start stalls in a phase.
        self.wait_start = self.ready_at = float("inf")
        self.phases_ended = 0  # of WAIT_PHASES, whose end lines were logged

    def ready_in(self) -> float:
        """Seconds from now until /health answers 200: startup_delay_s, plus cold_start_s when cold."""
        return float(self.cfg["startup_delay_s"]) + self.cold_s

    #: The phases of the readiness wait, in order (the load is over before the port is bound).
    WAIT_PHASES = ("kv_cache", "cuda_graphs", "warmup")

    def _begin_wait(self) -> None:
        """The readiness wait begins: ready ``ready_in()`` from now, unless it stalls."""
        self.wait_start = time.monotonic()
        self.ready_at = self.wait_start + self.ready_in()
        if self.stall_in is None:
            self.app.ready_at = self.ready_at

    def _log_phase_ends(self) -> None:
        """Log the end line of each phase of the readiness wait whose time came, in order: the
        memory pool when the wait begins, the CUDA graphs ``warmup_s`` before ready (the cold compile
        is theirs), the ready line at ready; none from the ``stall_in`` phase on."""
        if self.wait_start == float("inf"):
            return
        now = time.monotonic()
        mem = self.info.get("mem_fraction_static")
        while self.phases_ended < len(self.WAIT_PHASES):
            phase = self.WAIT_PHASES[self.phases_ended]
            if phase == self.stall_in:
                return
            if phase == "kv_cache":
                log(startcache.memory_pool_line(mem))
            elif phase == "cuda_graphs":
                if now < self.ready_at - startcache.warmup_s(self.cfg):
                    return
                log(startcache.graph_end_line(self.app.version, now - self.wait_start, mem))
            else:
                if not self.app.ready:  # also never while the fault never_ready holds
                    return
                problem = startcache.mark(self.cache_marker)
                if problem:
                    log(problem)
                log(startcache.READY_LINE)
            self.phases_ended += 1

    def crashed(self) -> bool:
        if time.monotonic() < self.crash_at:
            return False
        self.faults.crash()
        return True

    def run(self) -> int:
        pd = self.app.disagg
        try:
            if self.workers.pids:
                log(f"TP workers started: pids {', '.join(map(str, self.workers.pids))}")
            missing = pd.engine_missing() if pd is not None else None
            if missing:  # SGLang imports its KV transfer engine while it starts (disagg.py)
                print(missing, file=sys.stderr, flush=True)
                return 1
            code = self._wait_to_listen()
            if code is None:
                code = self._bind()
            if code is None and pd is not None and pd.mode == "prefill":
                code = self._bind_bootstrap(pd)
            return code if code is not None else self._watch()
        finally:
            self.app.stopping.set()
            if self.bootstrap is not None:
                self.bootstrap.shutdown()
                self.bootstrap.server_close()
            if self.leader is not None:
                self.leader.shutdown()  # SGLang's ShutdownReq broadcast: the followers stop cleanly
            if self.httpd is not None:
                self.httpd.shutdown()
                self.httpd.server_close()
            self.workers.stop()

    def _wait_to_listen(self) -> Optional[int]:
        """None once ``listen_delay_s`` is over, else the exit code (a crash, or a stop)."""
        listen_at = time.monotonic() + float(self.cfg["listen_delay_s"])
        while time.monotonic() < listen_at:
            if self.crashed():
                return 1
            if self.stop.wait(max(0.0, min(listen_at, self.crash_at) - time.monotonic())):
                return 0
        return 1 if self.crashed() else None

    def _bind(self) -> Optional[int]:
        """Serve the API in a thread; None, or 1 when the port cannot be bound."""
        leader = self.leader
        host, port = str(self.info.get("host") or "127.0.0.1"), int(self.info.get("port") or 30000)
        try:
            self.httpd = Server(host, port, self.app)
        except OSError as e:
            print(f"sglang (simulated): cannot listen on {host}:{port}: {e}", file=sys.stderr,
                  flush=True)
            return 1
        if leader is None or leader.all_joined.is_set():
            self._begin_wait()
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="http",
                         daemon=True).start()
        log(f"Uvicorn running on http://{host}:{port} (simulated; /health is 503 "
            + ("forever: fault never_ready)" if self.faults.never_ready
               else f"forever: the start stalls in {self.stall_in})" if self.stall_in
               else f"for {self.ready_in():g} s" + (" after every follower node joined)" if leader else ")")))
        return None

    def _bind_bootstrap(self, pd: Disagg) -> Optional[int]:
        """A prefill server's bootstrap server on --disaggregation-bootstrap-port; 1 when it cannot bind."""
        try:
            self.bootstrap = Server(pd.host, pd.bootstrap_port, pd.bootstrap_app())
        except OSError as e:
            print(f"sglang (simulated): cannot listen on {pd.host}:{pd.bootstrap_port} (bootstrap server): {e}",
                  file=sys.stderr, flush=True)
            return 1
        threading.Thread(target=self.bootstrap.serve_forever, kwargs={"poll_interval": 0.05}, name="bootstrap",
                         daemon=True).start()
        log(f"Prefill bootstrap server on {pd.host}:{pd.bootstrap_port} (simulated KV transfer, "
            f"{pd.backend} backend)")
        return None

    def _watch(self) -> int:
        while not self.stop.wait(max(0.0, min(0.05, self.crash_at - time.monotonic()))):
            if self.crashed():
                return 1
            if self.app.disagg is not None and self.app.disagg.fatal:
                return 1  # SGLang's scheduler raised: the server ends
            if self.leader is not None and self._rendezvous_failed(self.leader):
                return 1
            self._log_phase_ends()
            dead = self.workers.dead()
            if dead and not self.stop.wait(STOP_GRACE_S):
                print(f"sglang (simulated): {dead}; shutting down", file=sys.stderr, flush=True)
                return 1
            if dead:  # systemd's stop signals every process of the unit at once: the children went first
                break
        log("Received a stop signal: shutting down")
        return 0

    def _rendezvous_failed(self, leader: multinode.Leader) -> bool:
        """Start the readiness delay once every follower joined; True (after the error
        line) when a follower was lost or did not join in time."""
        cfg, nnodes = self.cfg, self.nnodes
        if leader.lost:
            print(multinode.nccl_error(f"rank 0: {leader.lost}"), file=sys.stderr, flush=True)
            return True
        if leader.all_joined.is_set() and self.wait_start == float("inf"):
            log(f"All {nnodes - 1} follower node(s) joined: TP group of {self.info.get('tp_size')} ranks "
                f"over {nnodes} nodes is up")
            self._begin_wait()
        elif not leader.all_joined.is_set() and time.monotonic() > self.rendezvous_deadline:
            print(f"torch.distributed.DistStoreError: Timed out after {cfg['dist_init_timeout_s']:g} "
                  f"seconds waiting for clients. {leader.joined()}/{nnodes - 1} clients joined. "
                  "(SIMULATED)", file=sys.stderr, flush=True)
            return True
        return False
