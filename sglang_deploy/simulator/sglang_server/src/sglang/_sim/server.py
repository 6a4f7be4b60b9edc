"""``python -m sglang.launch_server``: the SIMULATED SGLang server.

Parses its argv with the version's parser (argparse exits 2 on a refused
argv), prints the parsed arguments (secrets redacted), starts one child per
TP rank beyond 0, and serves SGLang's HTTP API with
``http.server.ThreadingHTTPServer`` until SIGTERM/SIGINT (then exit 0).
"""

from __future__ import annotations

import json
import select
import signal
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import urlsplit

import sglang
from sglang._sim import catalog, config, multinode, resolve
from sglang._sim.faults import Faults
from sglang._sim.engine import Engine, Plan, RequestError, sleep_until, token_text
from sglang._sim.workers import TPWorkers
from sglang.srt.server_args import ServerArgs, prepare_server_args


def _log(msg: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp}] {msg}", flush=True)


class App:
    """Everything a request handler needs; one per process."""

    def __init__(self, args: ServerArgs, info: Dict[str, Any], cfg: Dict[str, Any], version: str):
        self.args = args
        self.info = info
        self.cfg = cfg
        self.version = version
        self.api_key = getattr(args, "api_key", None)
        self.served_name = info.get("served_model_name") or info.get("model_path")
        self.engine = Engine(info, cfg, resolve.spec_accept_length(info, cfg))
        self.faults = Faults(cfg)
        self.ready_at = float("inf")
        self.created = int(time.time())
        self.stopping = threading.Event()

    # -- state ------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return not self.faults.never_ready and time.monotonic() >= self.ready_at

    def server_info(self) -> Dict[str, Any]:
        out = dict(self.info)
        dp = int(self.info.get("dp_size") or 1)
        out["internal_states"] = [self.engine.internal_state() for _ in range(dp)]
        return config.deep_merge(out, self.cfg.get("server_info_overrides") or {})

    def routes(self) -> Dict[str, Tuple[Tuple[str, ...], Callable[["Handler"], None]]]:
        r: Dict[str, Tuple[Tuple[str, ...], Callable[[Handler], None]]] = {
            "/health": (("GET",), Handler.h_health),
            "/health_generate": (("GET",), Handler.h_health),
            "/get_server_info": (("GET",), Handler.h_server_info),
            "/model_info": (("GET",), Handler.h_model_info),
            "/get_model_info": (("GET",), Handler.h_model_info),
            "/v1/models": (("GET",), Handler.h_models),
            "/v1/completions": (("POST",), Handler.h_completions),
            "/v1/chat/completions": (("POST",), Handler.h_chat),
            "/generate": (("POST",), Handler.h_generate),
        }
        if resolve.feature("server_info_path", self.version, self.cfg):
            r["/server_info"] = (("GET",), Handler.h_server_info)
        if self.info.get("enable_metrics"):
            r["/metrics"] = (("GET",), Handler.h_metrics)
        return r

    def intercept(self, handler: "Handler", method: str, path: str) -> bool:
        """Extension point for later simulated behaviours: return True when the
        request was answered here.  Nothing is intercepted here; the faults of
        ``faults.py`` act inside the endpoints they change."""
        return False


class Abandoned(Exception):
    """The response was given up on purpose (faults.stall_forever_after_tokens)."""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    disable_nagle_algorithm = True

    @property
    def app(self) -> App:
        return self.server.app  # type: ignore[attr-defined]

    # -- plumbing -----------------------------------------------------------------

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        print(f"INFO:     {self.client_address[0]}:{self.client_address[1]} - {format % args}",
              flush=True)

    def send_json(self, status: int, obj: Any, headers: Optional[Dict[str, str]] = None) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def send_empty(self, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def send_error_json(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        self.send_json(
            status,
            {"object": "error", "message": message, "type": kind, "param": None, "code": status},
        )

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def send_event(self, payload: Any) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        data = b"data: " + text.encode() + b"\n\n"
        self.wfile.write(b"%X\r\n%s\r\n" % (len(data), data))

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")

    def read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def dispatch(self, method: str) -> None:
        path = urlsplit(self.path).path
        body = self.read_body() if method in ("POST", "PUT", "PATCH") else b""
        self.body = body
        app = self.app
        try:
            if app.intercept(self, method, path):
                return
            if (
                app.api_key
                and method != "OPTIONS"
                and not path.startswith("/health")
                and not path.startswith("/metrics")
                and self.headers.get("Authorization") != f"Bearer {app.api_key}"
            ):
                self.send_json(401, {"error": "Unauthorized"})
                return
            route = app.routes().get(path)
            if route is None:
                self.send_json(404, {"detail": "Not Found"})
                return
            methods, fn = route
            if method not in methods:
                self.send_json(405, {"detail": "Method Not Allowed"})
                return
            fn(self)
        except (BrokenPipeError, ConnectionResetError, Abandoned):
            self.close_connection = True

    def do_GET(self) -> None:  # noqa: N802
        self.dispatch("GET")

    def do_POST(self) -> None:  # noqa: N802
        self.dispatch("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self.dispatch("PUT")

    def do_DELETE(self) -> None:  # noqa: N802
        self.dispatch("DELETE")

    # -- endpoints ------------------------------------------------------------------

    def h_health(self) -> None:
        self.send_empty(self.app.faults.health_status(self.app.ready))

    def h_server_info(self) -> None:
        self.send_json(200, self.app.server_info())

    def h_model_info(self) -> None:
        self.send_json(200, resolve.model_info(self.app.info, self.app.cfg))

    def h_models(self) -> None:
        app = self.app
        name = app.faults.model_name(app.served_name)
        self.send_json(
            200,
            {
                "object": "list",
                "data": [
                    {
                        "id": name,
                        "object": "model",
                        "created": app.created,
                        "owned_by": "sglang",
                        "root": name,
                        "max_model_len": app.info.get("context_length"),
                    }
                ],
            },
        )

    def h_metrics(self) -> None:
        s = self.app.engine.stats
        name = self.app.served_name
        lines = [
            "# TYPE sglang:prompt_tokens_total counter",
            f'sglang:prompt_tokens_total{{model_name="{name}"}} {s.prompt_tokens}',
            "# TYPE sglang:generation_tokens_total counter",
            f'sglang:generation_tokens_total{{model_name="{name}"}} {s.generation_tokens}',
            "# TYPE sglang:num_requests_total counter",
            f'sglang:num_requests_total{{model_name="{name}"}} {s.requests}',
            "# TYPE sglang:gen_throughput gauge",
            f'sglang:gen_throughput{{model_name="{name}"}} {s.last_gen_throughput}',
        ]
        body = ("\n".join(lines) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    # -- generation -------------------------------------------------------------------

    def _request(self) -> Optional[Dict[str, Any]]:
        if not self.app.ready:
            self.send_error_json(503, "The server is starting (loading the model).",
                                 "ServiceUnavailableError")
            return None
        try:
            req = json.loads(self.body or b"{}")
        except ValueError as e:
            self.send_error_json(400, f"invalid JSON body: {e}")
            return None
        if not isinstance(req, dict):
            self.send_error_json(400, "the request body must be a JSON object")
            return None
        failure = self.app.faults.http_500()
        if failure:
            self.send_error_json(500, failure, "InternalServerError")
            return None
        return req

    def _plan(self, req: Dict[str, Any], prompt: Any, max_tokens: Any, ignore_eos: bool,
              arrival: float) -> Optional[Plan]:
        engine, faults = self.app.engine, self.app.faults
        try:
            return engine.plan(engine.count_prompt_tokens(prompt), max_tokens, ignore_eos, arrival,
                               extra_ttft=faults.extra_ttft, stall=faults.stall())
        except RequestError as e:
            self.send_error_json(400, str(e))
            return None

    def _run(self, plan: Plan, emit: Callable[[int, int], None]) -> Tuple[Optional[float], Optional[float]]:
        """Send chunks on schedule; (first, last) send times.  Recorded in the
        stats even when the client goes away half-way."""
        times: List[float] = []
        hang = plan.hang_index()
        try:
            for index, (due, start, size) in enumerate(plan.schedule()):
                if index == hang:
                    self._hang()
                sleep_until(due)
                emit(start, size)
                times.append(time.monotonic())
        finally:
            self.app.engine.stats.record(plan, times[0] if times else None,
                                         times[-1] if times else None)
        return (times[0], times[-1]) if times else (None, None)

    def _hang(self) -> None:
        """Send nothing more but keep the connection open until the client
        closes it (or the server stops); then give the response up."""
        try:
            self.wfile.flush()
        except OSError:
            raise Abandoned() from None
        sock = self.connection
        while not self.app.stopping.is_set():
            try:
                readable, _, _ = select.select([sock], [], [], 0.25)
                if readable and not sock.recv(1, socket.MSG_PEEK):
                    break  # EOF: the client gave up
            except (OSError, ValueError):
                break
            if readable:
                time.sleep(0.25)  # the client sent more; it is still there
        raise Abandoned()

    def _openai(self, chat: bool) -> None:
        arrival = time.monotonic()
        req = self._request()
        if req is None:
            return
        if chat:
            messages = req.get("messages")
            if not isinstance(messages, list) or not messages:
                self.send_error_json(400, "messages must be a non-empty list")
                return
            prompt: Any = messages
            max_tokens = req.get("max_completion_tokens", req.get("max_tokens"))
        else:
            if "prompt" not in req:
                self.send_error_json(400, "prompt is required")
                return
            prompt = req["prompt"]
            max_tokens = req.get("max_tokens", 16)
        plan = self._plan(req, prompt, max_tokens, bool(req.get("ignore_eos")), arrival)
        if plan is None:
            return
        app = self.app
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        model = app.faults.model_name(req.get("model") or app.served_name)
        send_usage = bool(app.cfg.get("usage", True))
        created = int(time.time())
        usage = {
            "prompt_tokens": plan.prompt_tokens,
            "completion_tokens": plan.completion_tokens,
            "total_tokens": plan.prompt_tokens + plan.completion_tokens,
            "prompt_tokens_details": None,
        }
        obj = "chat.completion" if chat else "text_completion"

        if not req.get("stream"):
            self._run(plan, lambda start, size: None)
            text = "".join(token_text(i) for i in range(plan.completion_tokens))
            if plan.completion_tokens == 0:
                sleep_until(plan.t0)
            if chat:
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
            answer = {"id": rid, "object": obj, "created": created, "model": model,
                      "choices": [choice]}
            if send_usage:
                answer["usage"] = usage
            self.send_json(200, answer)
            return

        include_usage = send_usage and bool((req.get("stream_options") or {}).get("include_usage"))
        base = {"id": rid, "object": obj + ".chunk" if chat else obj, "created": created,
                "model": model}

        def chunk(choice: Dict[str, Any]) -> Dict[str, Any]:
            c = dict(base, choices=[dict({"index": 0, "logprobs": None}, **choice)])
            if include_usage:
                c["usage"] = None
            return c

        self.start_stream()
        sent_role = [False]

        def emit(start: int, size: int) -> None:
            text = "".join(token_text(i) for i in range(start, start + size))
            if chat:
                if not sent_role[0]:
                    self.send_event(chunk({"delta": {"role": "assistant", "content": ""},
                                           "finish_reason": None, "matched_stop": None}))
                    sent_role[0] = True
                self.send_event(chunk({"delta": {"content": text}, "finish_reason": None,
                                       "matched_stop": None}))
            else:
                self.send_event(chunk({"text": text, "finish_reason": None, "matched_stop": None}))

        self._run(plan, emit)
        if plan.completion_tokens == 0:
            sleep_until(plan.t0)
        final = {"finish_reason": plan.finish_reason, "matched_stop": None}
        final.update({"delta": {}} if chat else {"text": ""})
        self.send_event(chunk(final))
        if include_usage:
            self.send_event(dict(base, choices=[], usage=usage))
        self.send_event("[DONE]")
        self.end_stream()

    def h_chat(self) -> None:
        self._openai(chat=True)

    def h_completions(self) -> None:
        self._openai(chat=False)

    def h_generate(self) -> None:
        """SGLang's native /generate (text in, text out; no token ids)."""
        arrival = time.monotonic()
        req = self._request()
        if req is None:
            return
        params = req.get("sampling_params") or {}
        prompt = req.get("text", req.get("input_ids", ""))
        plan = self._plan(req, prompt, params.get("max_new_tokens", 128),
                          bool(params.get("ignore_eos")), arrival)
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
            self._run(plan, lambda s, n: None)
            text = "".join(token_text(i) for i in range(plan.completion_tokens))
            self.send_json(200, {"text": text, "meta_info": meta(plan.completion_tokens, True)})
            return
        self.start_stream()
        total = len(plan.chunks)
        done_chunks = [0]

        def emit(start: int, size: int) -> None:
            done_chunks[0] += 1
            end = start + size
            text = "".join(token_text(i) for i in range(end))
            self.send_event({"text": text, "meta_info": meta(end, done_chunks[0] == total)})

        self._run(plan, emit)
        self.send_event("[DONE]")
        self.end_stream()


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, host: str, port: int, app: App):
        if ":" in host:
            self.address_family = socket.AF_INET6
        self.app = app
        super().__init__((host, port), Handler)


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
    crash_at = faults.crash_at()
    _log(f"SIMULATED SGLang {version}: a stand-in at the parser and HTTP boundaries; no model "
         f"is loaded. Behaviour from {cfg_path or 'built-in defaults'}"
         + (f" (keys it does not know: {', '.join(unknown)})" if unknown else "")
         + f"; {config.describe(cfg)}")
    _log("server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in args.redacted().items())
         + ")")
    data = catalog.load()
    info = resolve.server_info(args, version, cfg, list(argv), resolve.secret_option_strings(data))
    errors = resolve.startup_errors(info, version, cfg)
    if errors:
        print(f"ValueError: {errors[0]}", file=sys.stderr, flush=True)
        return 1

    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    nnodes, node_rank = int(info.get("nnodes") or 1), int(info.get("node_rank") or 0)
    if nnodes > 1 and node_rank > 0:
        return _follower(info, cfg, faults, crash_at, stop, nnodes, node_rank)

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
        _log(f"Rendezvous (simulated torch.distributed store) on port {leader.port}: waiting for "
             f"{nnodes - 1} follower node(s)")
    rendezvous_deadline = time.monotonic() + float(cfg["dist_init_timeout_s"])
    workers = TPWorkers.spawn_ranks(_local_ranks(info, nnodes, node_rank))
    httpd: Optional[Server] = None
    code = 0

    def crashed() -> bool:
        if time.monotonic() < crash_at:
            return False
        faults.crash()
        return True

    try:
        if workers.pids:
            _log(f"TP workers started: pids {', '.join(map(str, workers.pids))}")
        listen_at = time.monotonic() + float(cfg["listen_delay_s"])
        while time.monotonic() < listen_at:
            if crashed():
                code = 1
                return code
            if stop.wait(max(0.0, min(listen_at, crash_at) - time.monotonic())):
                return 0
        if crashed():
            code = 1
            return code
        host, port = str(info.get("host") or "127.0.0.1"), int(info.get("port") or 30000)
        try:
            httpd = Server(host, port, app)
        except OSError as e:
            print(f"sglang (simulated): cannot listen on {host}:{port}: {e}", file=sys.stderr,
                  flush=True)
            code = 1
            return code
        if leader is None or leader.all_joined.is_set():
            app.ready_at = time.monotonic() + float(cfg["startup_delay_s"])
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="http",
                         daemon=True).start()
        _log(f"Uvicorn running on http://{host}:{port} (simulated; /health is 503 "
             + ("forever: fault never_ready)" if faults.never_ready
                else f"for {cfg['startup_delay_s']} s" + (" after every follower node joined)" if leader else ")")))
        announced = False
        while not stop.wait(max(0.0, min(0.05, crash_at - time.monotonic()))):
            if crashed():
                code = 1
                break
            if leader is not None:
                if leader.lost:
                    print(multinode.nccl_error(f"rank 0: {leader.lost}"), file=sys.stderr, flush=True)
                    code = 1
                    break
                if leader.all_joined.is_set() and app.ready_at == float("inf"):
                    _log(f"All {nnodes - 1} follower node(s) joined: TP group of {info.get('tp_size')} ranks "
                         f"over {nnodes} nodes is up")
                    app.ready_at = time.monotonic() + float(cfg["startup_delay_s"])
                elif not leader.all_joined.is_set() and time.monotonic() > rendezvous_deadline:
                    print(f"torch.distributed.DistStoreError: Timed out after {cfg['dist_init_timeout_s']:g} "
                          f"seconds waiting for clients. {leader.joined()}/{nnodes - 1} clients joined. "
                          "(SIMULATED)", file=sys.stderr, flush=True)
                    code = 1
                    break
            if not announced and app.ready:
                _log("The server is fired up and ready to roll!")
                announced = True
            dead = workers.dead()
            if dead:
                print(f"sglang (simulated): {dead}; shutting down", file=sys.stderr, flush=True)
                code = 1
                break
        if code == 0:
            _log("Received a stop signal: shutting down")
        return code
    finally:
        app.stopping.set()
        if leader is not None:
            leader.shutdown()  # SGLang's ShutdownReq broadcast: the followers stop cleanly
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        workers.stop()


def _local_ranks(info: Dict[str, Any], nnodes: int, node_rank: int) -> List[int]:
    """The global TP ranks on this node: tp_size / nnodes of them."""
    per_node = max(int(info.get("tp_size") or 1) // max(nnodes, 1), 1)
    return list(range(node_rank * per_node, (node_rank + 1) * per_node))


class FollowerHandler(BaseHTTPRequestHandler):
    """SGLang's dummy health server on a follower node (utils/common.py
    launch_dummy_health_check_server): 200 on /health, /health_generate, /ping."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:  # noqa: N802
        path = urlsplit(self.path).path
        body = b"" if path in ("/health", "/health_generate", "/ping") else b'{"detail":"Not Found"}'
        self.send_response(200 if not body else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _HealthServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: Tuple[str, int], handler: Any):
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)


def _follower(info: Dict[str, Any], cfg: Dict[str, Any], faults: Faults, crash_at: float,
              stop: threading.Event, nnodes: int, node_rank: int) -> int:
    """A node rank >= 1: join rank 0, run this node's schedulers, serve only the dummy health
    endpoints; exit 1 when rank 0 is lost, 0 on rank 0's shutdown broadcast or SIGTERM."""
    addr = str(info.get("dist_init_addr") or "")
    follower = multinode.Follower(addr, node_rank, nnodes)
    workers = TPWorkers.spawn_ranks(_local_ranks(info, nnodes, node_rank))
    httpd: Optional[ThreadingHTTPServer] = None
    _log(f"Node rank {node_rank} of {nnodes}: joining rank 0 at {addr} (simulated torch.distributed); no "
         "tokenizer or HTTP API on this node")
    code = 0
    try:
        if time.monotonic() >= crash_at:  # crash_after_s 0: dies before it ever joins rank 0
            faults.crash()
            return 1
        result: Dict[str, Any] = {}

        def join() -> None:
            try:
                result["joined"] = follower.join(float(cfg["dist_init_timeout_s"]), stop)
            except multinode.RendezvousError as e:
                result["error"] = str(e)

        joiner = threading.Thread(target=join, name="join", daemon=True)
        joiner.start()
        while joiner.is_alive():
            if time.monotonic() >= crash_at:
                faults.crash()
                stop.set()
                return 1
            joiner.join(0.05)
        if "error" in result:
            print(result["error"], file=sys.stderr, flush=True)
            return 1
        if not result.get("joined"):
            _log("Received a stop signal before joining: shutting down")
            return 0
        _log(f"Joined rank 0 at {addr}: scheduler(s) of TP ranks {', '.join(map(str, workers.ranks))} running")
        if cfg.get("follower_health_server", True):
            host, port = str(info.get("host") or "127.0.0.1"), int(info.get("port") or 30000)
            try:
                httpd = _HealthServer((host, port), FollowerHandler)
            except OSError as e:
                print(f"sglang (simulated): cannot listen on {host}:{port} (the follower's health endpoint): {e}",
                      file=sys.stderr, flush=True)
                return 1
            threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="health",
                             daemon=True).start()
            _log(f"Follower health endpoint on http://{host}:{port}/health (simulated dummy server)")
        while not stop.wait(max(0.0, min(0.05, crash_at - time.monotonic()))):
            if time.monotonic() >= crash_at:
                faults.crash()
                code = 1
                break
            if follower.shutdown_requested.is_set():
                _log("Received ShutdownReq from rank 0: shutting down")
                break
            if follower.lost:
                print(multinode.nccl_error(f"node rank {node_rank}: {follower.lost}"), file=sys.stderr, flush=True)
                code = 1
                break
            dead = workers.dead()
            if dead:
                print(f"sglang (simulated): {dead}; shutting down", file=sys.stderr, flush=True)
                code = 1
                break
        else:
            _log("Received a stop signal: shutting down")
        return code
    finally:
        follower.close()
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        workers.stop()
