"""The gate's I/O: wait for a running SGLang (or OpenAI-compatible) server,
read what it resolved, stream fixed prompts at it with every line stamped on
arrival, sample NVML, read and append the baseline file; then hand the
records to the pure core (``measure.py``, ``verdict.py``) and assemble the
report. ``run_check`` never raises for a gate failure: a server that cannot be
measured gives a report with verdict ``error`` (exit 2), never a slow one.

Top floor (like ``cli.py``): it imports httpx and, with ``--nvml``, pynvml.
"""

from __future__ import annotations

import concurrent.futures
import datetime as _dt
import importlib.resources
import json
import shlex
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence
from urllib.parse import urlsplit

import httpx
import yaml

from . import measure, outcomes, verdict
from .measure import MeasureError, RequestFigures

# through importlib.resources: the gate also runs from a zipapp on the GPU host (roles/gatezip.py)
PROMPTS_FILE = importlib.resources.files("sglang_deploy") / "data" / "gate_prompts.yaml"
HEALTH_PATHS = ("/health_generate", "/health", "/v1/models")
PROGRESS_EVERY_S = 5.0
WARMUP_MAX_TOKENS = 32
CONCURRENT_ROUNDS_MAX = 3

Progress = Callable[[str], None]


class GateError(Exception):
    """The gate could not measure (exit 2): unreachable, never ready, bad
    arguments, an HTTP error or a broken stream mid-measurement."""

    def __init__(self, step: str, message: str):
        super().__init__(message)
        self.step = step
        self.message = message

    def __str__(self) -> str:
        return f"{self.step}: {self.message}"


@dataclass
class CheckOptions:
    url: str
    target_tok_s: float | None = None
    baseline: str | None = None
    tolerance: float = 0.10
    concurrency: int = 1
    model: str | None = None
    expect: str | None = None  # path of `sglang-deploy plan --json` output
    expect_host: str | None = None
    fail_on: frozenset[str] = verdict.DEFAULT_FAIL_ON
    ready_timeout: float = 600.0
    repeats: int = 5
    max_tokens: int = 256
    api_key: str | None = field(default=None, repr=False)
    hardware: str | None = None
    nvml: bool = False
    stall_timeout: float = 60.0
    record: bool = False
    prompts: Sequence[str] | None = None  # default: the shipped gate_prompts.yaml
    expect_plan: dict[str, Any] | None = field(default=None, repr=False)  # a plan object itself (wins over expect)
    # The server's systemd unit, watched on every readiness poll and, from a thread, about once
    # a second through the measurement: a failed or restarted unit ends the gate at once with
    # verdict "fail" and the journal tail (a crashed server is neither slow nor unmeasurable).
    watch: SystemdWatch | None = field(default=None, repr=False)


class ServiceDown(Exception):
    """The server's unit failed or restarted while the gate watched it."""

    def __init__(self, unit: str, reason: str, journal: str = ""):
        super().__init__(f"{unit}: {reason}")
        self.unit, self.reason, self.journal = unit, reason, journal


def local_shell(command: str) -> str:
    """Run a shell command on this machine; its stdout (``check --watch-unit`` on the host)."""
    try:
        proc = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        return ""
    return proc.stdout


class SystemdWatch:
    """One systemd unit, read through ``run`` (a shell command in, its stdout out): on this
    machine (:func:`local_shell`) or over the deploy's SSH connection. The first reading is
    the unit as the restart left it; any later one that shows it failed, stopped, restarting
    or on another main PID raises :class:`ServiceDown`. Safe to call from two threads."""

    def __init__(self, run: Callable[[str], str], unit: str, every_s: float = 1.0):
        self.run, self.unit, self.every_s = run, unit, every_s
        self.first: outcomes.UnitStatus | None = None
        self.last_check = float("-inf")
        self.lock = threading.Lock()

    def status(self) -> outcomes.UnitStatus:
        props = " ".join(f"-p {p}" for p in outcomes.UNIT_PROPERTIES)
        return outcomes.parse_unit_status(self.run(f"systemctl show {props} {shlex.quote(self.unit)}"))

    def failure(self) -> str | None:
        with self.lock:
            now = self.status()
            self.last_check = time.monotonic()
            if self.first is None:
                self.first = now
            return outcomes.unit_failure(self.first, now)

    def check(self, force: bool = False) -> None:
        """Raise ServiceDown (with the journal tail) when the unit is down; at most once per
        ``every_s`` unless ``force``."""
        if not force and time.monotonic() - self.last_check < self.every_s:
            return
        why = self.failure()
        if why:
            raise ServiceDown(self.unit, why, self.journal())

    def journal(self) -> str:
        return self.run(f"journalctl -u {shlex.quote(self.unit)} -n {outcomes.JOURNAL_LINES} --no-pager -o cat")


class AbortFileWatch(SystemdWatch):
    """A :class:`SystemdWatch` that also reads the gate as failed once ``path`` exists: its
    first line is the reason, the rest journal lines to report. The deploy's controller
    writes it when what it watches elsewhere fails (another member of a multi-node group)
    while this gate runs on rank 0's host."""

    def __init__(self, run: Callable[[str], str], unit: str, path: str, every_s: float = 1.0):
        super().__init__(run, unit, every_s)
        self.path = path
        self.aborted_journal = ""

    def failure(self) -> str | None:
        why = super().failure()
        if why:
            return why
        try:
            with open(self.path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError:
            return None
        reason, _, self.aborted_journal = text.partition("\n")
        return reason.strip() or f"{self.path} appeared"

    def journal(self) -> str:
        own = super().journal()
        return f"{own.rstrip()}\n{self.aborted_journal}" if self.aborted_journal else own


class _Watcher:
    """Checks ``watch`` about once a second in a thread while the measurement runs; on a
    failure it sets ``cancel`` (the streams stop at their next chunk) and keeps the error."""

    def __init__(self, watch: SystemdWatch | None):
        self.watch = watch
        self.cancel = threading.Event()
        self.error: ServiceDown | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> _Watcher:
        if self.watch is not None:
            self._thread = threading.Thread(target=self._loop, name="gate-watch", daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        assert self.watch is not None
        while not self._stop.wait(self.watch.every_s):
            try:
                self.watch.check(force=True)
            except ServiceDown as exc:
                self.error = exc
                self.cancel.set()
                return
            except Exception:  # noqa: BLE001 -- a watch that cannot read systemd must not end the gate
                continue

    def final_check(self) -> None:
        """After the measurement: the failure the thread saw, else one last reading of the unit."""
        if self.error is not None:
            raise self.error
        if self.watch is not None:
            self.watch.check(force=True)

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=35)


# ---------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------


def load_prompts(path: Path | importlib.resources.abc.Traversable = PROMPTS_FILE) -> list[str]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    prompts = [str(p["text"]).strip() for p in (data or {}).get("prompts") or []]
    if not prompts:
        raise ValueError(f"{path.name} holds no prompts")
    return prompts


def load_expect(path: str, host: str | None) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise GateError("--expect", f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise GateError("--expect", f"{path} is not JSON: {exc}") from None
    try:
        return verdict.select_plan(data, host)
    except ValueError as exc:
        raise GateError("--expect", f"{path}: {exc}") from None


def read_baseline(path: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Entries of a JSON-lines baseline file (oldest first) and warnings."""
    p = Path(path)
    if not p.exists():
        return [], [f"baseline file {path} does not exist yet: no baseline rule applied"]
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise GateError("--baseline", f"cannot read {path}: {exc.strerror or exc}") from None
    entries, bad = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(obj, dict):
            entries.append(obj)
        else:
            bad += 1
    warnings = [f"baseline file {path}: {bad} line(s) are not JSON objects and were skipped"] if bad else []
    return entries, warnings


def append_baseline(path: str, report: dict[str, Any]) -> None:
    p = Path(path)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(report, separators=(",", ":"), sort_keys=True) + "\n")


def _server_text(r: httpx.Response) -> str:
    try:
        body = r.json()
    except ValueError:
        return r.text.strip()[:200]
    if isinstance(body, dict):
        err = body.get("error")
        msg = body.get("message") or (err.get("message") if isinstance(err, dict) else err) or body.get("detail")
        if msg:
            return str(msg)[:200]
    return json.dumps(body)[:200]


def _permanent_connect_failure(exc: Exception) -> bool:
    text = str(exc)
    return "Name or service not known" in text or "nodename nor servname" in text


# ---------------------------------------------------------------------------
# 1. ready
# ---------------------------------------------------------------------------


def wait_ready(client: httpx.Client, timeout: float, progress: Progress,
               clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep,
               watch: Callable[[], None] | None = None) -> dict[str, Any]:
    """Poll /health_generate (then /health, then /v1/models where the server has
    no such path) with exponential backoff capped at 1 s, until 200 or timeout.
    ``watch`` runs before each wait (see ``CheckOptions.watch``)."""
    start = clock()
    next_note = start + PROGRESS_EVERY_S
    idx, delay = 0, 0.05
    reached = False
    last = "no answer yet"
    polls = 0
    while True:
        path = HEALTH_PATHS[idx]
        remaining = timeout - (clock() - start)
        try:
            polls += 1
            r = client.get(path, timeout=httpx.Timeout(max(0.5, min(30.0, remaining)), connect=min(5.0, max(0.5, remaining))))
            reached = True
            if r.status_code == 200:
                return {"ready_s": round(clock() - start, 3), "endpoint": path, "polls": polls}
            if r.status_code in (404, 405) and idx < len(HEALTH_PATHS) - 1:
                idx += 1
                continue
            if r.status_code in (401, 403):
                raise GateError("ready", f"{path} answered {r.status_code} (unauthorized): pass the server's "
                                         "API key with --api-key-env VAR")
            last = f"{path} answered {r.status_code}"
        except httpx.ConnectError as exc:
            if _permanent_connect_failure(exc):
                raise GateError("ready", f"cannot resolve the host of the URL: {exc}") from None
            last = f"connection failed ({exc})"
        except httpx.TimeoutException:
            reached = True
            last = f"{path} timed out"
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}: {exc}"
        now = clock()
        if now - start >= timeout:
            if reached:
                raise GateError("ready", f"the server never became ready within {timeout:g} s (last: {last})")
            raise GateError("ready", f"the server is unreachable: nothing answered within {timeout:g} s "
                                     f"(last: {last})")
        if now >= next_note:
            progress(f"waiting for the server to be ready: {now - start:.0f} s of {timeout:g} s (last: {last})")
            next_note = now + PROGRESS_EVERY_S
        if watch is not None:
            watch()
        sleep(max(0.0, min(delay, timeout - (now - start))))
        delay = min(delay * 2, 1.0)


# ---------------------------------------------------------------------------
# 2. what the server resolved
# ---------------------------------------------------------------------------


def _get_json(client: httpx.Client, path: str, step: str) -> Any:
    """GET ``path`` and decode its JSON; None when the server has no such endpoint (404/405).

    Transport errors, 401/403 (with the hint to pass the API key), any other
    status and a body that is not JSON are the gate's own failure (GateError).
    """
    try:
        r = client.get(path)
    except httpx.HTTPError as exc:
        raise GateError(step, f"{path}: {type(exc).__name__}: {exc}") from None
    if r.status_code in (404, 405):
        return None
    if r.status_code in (401, 403):
        raise GateError(step, f"{path} answered {r.status_code} (unauthorized): pass the API key "
                              "with --api-key-env VAR")
    if r.status_code != 200:
        raise GateError(step, f"{path} answered {r.status_code}: {_server_text(r)}")
    try:
        return r.json()
    except ValueError:
        raise GateError(step, f"{path} answered something that is not JSON") from None


def read_server_info(client: httpx.Client) -> tuple[dict[str, Any] | None, str | None]:
    for path in ("/server_info", "/get_server_info"):
        body = _get_json(client, path, "server_info")
        if isinstance(body, dict):
            return body, path
    return None, None


def list_models(client: httpx.Client) -> list[str] | None:
    body = _get_json(client, "/v1/models", "models")
    if body is None:
        return None
    try:
        return [str(m["id"]) for m in body.get("data") or [] if isinstance(m, dict) and "id" in m]
    except AttributeError:
        raise GateError("models", "/v1/models answered something that is not a model list") from None


# ---------------------------------------------------------------------------
# 3. streams
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestShape:
    """How this server is asked: endpoint and the optional fields it accepts."""

    path: str  # /v1/chat/completions | /v1/completions
    model: str | None
    ignore_eos: bool
    include_usage: bool

    def body(self, prompt: str, max_tokens: int) -> dict[str, Any]:
        body: dict[str, Any] = {"max_tokens": max_tokens, "temperature": 0, "stream": True}
        if self.model:
            body["model"] = self.model
        if self.path.endswith("chat/completions"):
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        if self.ignore_eos:
            body["ignore_eos"] = True
        if self.include_usage:
            body["stream_options"] = {"include_usage": True}
        return body


class _HTTPRefused(Exception):
    def __init__(self, status: int, text: str):
        super().__init__(f"{status}: {text}")
        self.status = status
        self.text = text


@dataclass
class Recorded:
    t_sent: float
    lines: list[tuple[float, str]]
    t_end: float


class _Cancelled(Exception):
    """The watcher saw the service go down: the stream was abandoned."""


def record_stream(client: httpx.Client, path: str, body: dict[str, Any],
                  cancel: threading.Event | None = None) -> Recorded:
    """POST and stamp every SSE line with perf_counter() when its bytes arrive; give up at
    the next chunk once ``cancel`` is set."""
    stamped: list[tuple[float, bytes]] = []
    buf = b""
    t_sent = time.perf_counter()
    try:
        with client.stream("POST", path, json=body) as r:
            if r.status_code != 200:
                r.read()
                raise _HTTPRefused(r.status_code, _server_text(r))
            for data in r.iter_bytes():
                t = time.perf_counter()
                if cancel is not None and cancel.is_set():
                    raise _Cancelled()
                buf += data
                if b"\n" in buf:
                    *complete, buf = buf.split(b"\n")
                    stamped.extend((t, line) for line in complete)
            t_end = time.perf_counter()
    except httpx.ReadTimeout:
        raise GateError("measure", f"{path}: the stream stalled (no data for the stall timeout) after "
                                   f"{len(stamped)} line(s)") from None
    except httpx.TimeoutException as exc:
        raise GateError("measure", f"{path}: timed out ({type(exc).__name__})") from None
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        raise GateError("measure", f"{path}: the server broke off the response after {len(stamped)} "
                                   f"line(s): {exc}") from None
    except httpx.ConnectError as exc:
        raise GateError("measure", f"{path}: cannot connect: {exc}") from None
    if buf:
        stamped.append((t_end, buf))
    return Recorded(t_sent, [(t, line.decode("utf-8", "replace")) for t, line in stamped], t_end)


def measure_one(client: httpx.Client, shape: RequestShape, prompt: str, max_tokens: int,
                cancel: threading.Event | None = None) -> RequestFigures:
    try:
        rec = record_stream(client, shape.path, shape.body(prompt, max_tokens), cancel)
    except _HTTPRefused as exc:
        raise GateError("measure", f"{shape.path} answered {exc.status}: {exc.text}") from None
    parsed = measure.parse_sse(rec.lines)
    if parsed.error:
        raise GateError("measure", f"{shape.path}: the server reported an error mid-stream: {parsed.error}")
    if not parsed.done and parsed.finish_reason is None:
        raise GateError("measure", f"{shape.path}: the stream ended before the response finished")
    try:
        return measure.measure_request(rec.t_sent, parsed.events, parsed.usage,
                                       finish_reason=parsed.finish_reason, max_tokens=max_tokens)
    except MeasureError as exc:
        raise GateError("measure", f"{shape.path}: {exc}") from None


def negotiate(client: httpx.Client, model: str | None, prompt: str, max_tokens: int,
              warnings: list[str]) -> tuple[RequestShape, RequestFigures | None]:
    """Warm-up request that also finds what this server accepts: chat first,
    then completions; ignore_eos and include_usage dropped only if refused."""
    ladders = [
        ("/v1/chat/completions", [(True, True), (False, True), (False, False)]),
        ("/v1/completions", [(True, True), (False, True), (False, False)]),
    ]
    first_refusal: str | None = None
    for path, variants in ladders:
        for ignore_eos, usage in variants:
            shape = RequestShape(path, model, ignore_eos, usage)
            try:
                rec = record_stream(client, path, shape.body(prompt, max_tokens))
            except _HTTPRefused as exc:
                if exc.status in (401, 403):
                    raise GateError("warm-up", f"{path} answered {exc.status} (unauthorized): pass the API key "
                                               "with --api-key-env VAR") from None
                if exc.status >= 500:
                    raise GateError("warm-up", f"{path} answered {exc.status}: {exc.text}") from None
                first_refusal = first_refusal or f"{path} answered {exc.status}: {exc.text}"
                if exc.status in (404, 405):
                    break  # no such endpoint: next one
                continue
            parsed = measure.parse_sse(rec.lines)
            if parsed.error:
                raise GateError("warm-up", f"{path}: the server reported an error mid-stream: {parsed.error}")
            if not parsed.events:
                raise GateError("warm-up", f"{path}: the warm-up stream carried no text")
            if path != "/v1/chat/completions":
                warnings.append("the server has no usable /v1/chat/completions: measured with /v1/completions")
            if not ignore_eos:
                warnings.append("the server refused ignore_eos: output length may vary between requests")
            if not usage:
                warnings.append("the server refused stream_options.include_usage")
            figures = None
            try:
                figures = measure.measure_request(rec.t_sent, parsed.events, parsed.usage,
                                                  finish_reason=parsed.finish_reason, max_tokens=max_tokens)
            except MeasureError:
                pass
            return shape, figures
    raise GateError("warm-up", f"the server accepted no streamed request ({first_refusal})")


def run_single(client: httpx.Client, shape: RequestShape, prompts: Sequence[str], repeats: int,
               max_tokens: int, progress: Progress, cancel: threading.Event | None = None) -> list[RequestFigures]:
    out = []
    for i in range(repeats):
        out.append(measure_one(client, shape, prompts[i % len(prompts)], max_tokens, cancel))
    progress(f"single stream: {repeats} request(s), median decode "
             f"{measure.spread([r.decode_tok_s for r in out]).median:.1f} tok/s")
    return out


def run_concurrent(client: httpx.Client, shape: RequestShape, prompts: Sequence[str], n: int, rounds: int,
                   max_tokens: int, progress: Progress,
                   cancel: threading.Event | None = None) -> list[list[RequestFigures]]:
    """``rounds`` rounds of ``n`` concurrent streams. Each round's workers are started
    first and released together from a barrier, so the streams start as close together
    as the client can send them (the aggregate's window opens at the first send: a
    stream started late would lower it without the server being slow)."""
    results: list[list[RequestFigures]] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=n) as pool:
        for _ in range(rounds):
            barrier = threading.Barrier(n)

            def one(i: int, barrier: threading.Barrier = barrier) -> RequestFigures:
                barrier.wait(timeout=60)
                return measure_one(client, shape, prompts[i % len(prompts)], max_tokens, cancel)

            futures = [pool.submit(one, i) for i in range(n)]
            results.append([f.result() for f in futures])
    progress(f"{n} concurrent streams: {rounds} round(s)")
    return results


# ---------------------------------------------------------------------------
# 5. NVML (optional, on the GPU host)
# ---------------------------------------------------------------------------


class NvmlSampler:
    """Samples clocks, throttle reasons, memory and processes every ``every_s``
    in a thread while the measurement runs."""

    def __init__(self, indices: Sequence[int] | None = None, every_s: float = 0.5):
        self.indices = list(indices) if indices is not None else None
        self.every_s = every_s
        self.samples: list[dict[str, Any]] = []
        self.error: str | None = None
        self.names: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Any = None

    def start(self) -> bool:
        try:
            import pynvml  # noqa: PLC0415  (optional: only with --nvml)

            pynvml.nvmlInit()
        except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, ...
            self.error = f"NVML unavailable ({type(exc).__name__}: {exc})"
            return False
        self._nvml = pynvml
        try:
            count = pynvml.nvmlDeviceGetCount()
        except Exception as exc:
            self.error = f"NVML: {exc}"
            return False
        if self.indices is None:
            self.indices = list(range(count))
        self.indices = [i for i in self.indices if 0 <= i < count]
        self.names = [str(self._call("nvmlDeviceGetName", self._handle(i)) or "?") for i in self.indices]
        self.sample()
        self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)
        self._thread.start()
        return True

    def _handle(self, i: int) -> Any:
        return self._call("nvmlDeviceGetHandleByIndex", i)

    def _call(self, name: str, *args: Any) -> Any:
        fn = getattr(self._nvml, name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except Exception:
            return None

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.sample()

    def sample(self) -> None:
        nv = self._nvml
        gpus = []
        for i in self.indices or []:
            h = self._handle(i)
            if h is None:
                continue
            sm = getattr(nv, "NVML_CLOCK_SM", 1)
            mask = self._call("nvmlDeviceGetCurrentClocksEventReasons", h)
            if mask is None:
                mask = self._call("nvmlDeviceGetCurrentClocksThrottleReasons", h)
            mem = self._call("nvmlDeviceGetMemoryInfo", h)
            procs = []
            for p in self._call("nvmlDeviceGetComputeRunningProcesses", h) or []:
                pid = getattr(p, "pid", None)
                cmd = _cmdline(pid)
                used = getattr(p, "usedGpuMemory", None)
                procs.append({"pid": pid, "name": cmd[:80] if cmd else None,
                              "memory_mib": (used or 0) / 2**20 if isinstance(used, int) else 0.0,
                              "server": "sglang" in cmd})
            gpus.append({
                "index": i,
                "name": self._call("nvmlDeviceGetName", h),
                "sm_clock_mhz": self._call("nvmlDeviceGetClockInfo", h, sm),
                "max_sm_clock_mhz": self._call("nvmlDeviceGetMaxClockInfo", h, sm),
                "throttle_mask": mask if isinstance(mask, int) else None,
                "memory_used_mib": mem.used / 2**20 if mem is not None else None,
                "memory_total_mib": mem.total / 2**20 if mem is not None else None,
                "temperature_c": self._call("nvmlDeviceGetTemperature", h, getattr(nv, "NVML_TEMPERATURE_GPU", 0)),
                "processes": procs,
            })
        self.samples.append({"t": time.perf_counter(), "gpus": gpus})

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._nvml is not None:
            self.sample()
            self._call("nvmlShutdown")

    @property
    def hardware(self) -> str | None:
        if not self.names:
            return None
        names = sorted(set(self.names))
        return " + ".join(f"{self.names.count(n)}x {n}" for n in names)


def _cmdline(pid: Any) -> str:
    if not isinstance(pid, int):
        return ""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()


# ---------------------------------------------------------------------------
# the whole check
# ---------------------------------------------------------------------------


def _hardware_from_plan(plan: dict[str, Any] | None) -> str | None:
    g = (plan or {}).get("gpus") or {}
    if g.get("model") and g.get("count"):
        return f"{g['count']}x {g['model']}"
    return None


def _dedupe(items: Sequence[str]) -> list[str]:
    seen: list[str] = []
    for x in items:
        if x not in seen:
            seen.append(x)
    return seen


def _short_report(opts: CheckOptions, partial: dict[str, Any] | None, verdict_: str, reason: str,
                  **extra: Any) -> dict[str, Any]:
    """A report that ends before the verdict of the figures: what was gathered, plus why."""
    report = dict(partial or {})
    report.update({"verdict": verdict_, "exit_code": 2 if verdict_ == "error" else 1, "url": opts.url,
                   "reasons": [reason], **extra})
    for k, v in (("decode_tok_s", None), ("ttft_s", None), ("target_tok_s", opts.target_tok_s),
                 ("server_config_diffs", []), ("warnings", []), ("requests", []), ("itl_ms", None),
                 ("accept_length", None), ("key", None), ("server", None)):
        report.setdefault(k, v)
    report.setdefault("created", _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    return _ordered(report)


def error_report(opts: CheckOptions, exc: GateError, partial: dict[str, Any] | None = None) -> dict[str, Any]:
    """The gate could not measure: verdict ``error`` (exit 2)."""
    return _short_report(opts, partial, "error", f"could not measure: {exc}",
                         error={"step": exc.step, "message": exc.message})


def service_down_report(opts: CheckOptions, exc: ServiceDown, partial: dict[str, Any] | None = None
                        ) -> dict[str, Any]:
    """The watched unit failed or restarted: verdict ``fail`` (exit 1) with the journal tail."""
    return _short_report(opts, partial, "fail", f"the server did not stay up: {exc.unit}: {exc.reason}",
                         service_failure={"unit": exc.unit, "reason": exc.reason, "journal": exc.journal})


def run_check(opts: CheckOptions, progress: Progress = lambda msg: None,
              transport: httpx.BaseTransport | None = None) -> dict[str, Any]:
    """The whole gate against ``opts.url``; returns the report (never raises a
    GateError). ``transport`` replaces the network (tests)."""
    partial: dict[str, Any] = {}
    try:
        return _run(opts, progress, partial, transport)
    except GateError as exc:
        return error_report(opts, exc, partial)
    except ServiceDown as exc:
        return service_down_report(opts, exc, partial)


def _validate(opts: CheckOptions) -> None:
    parts = urlsplit(opts.url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise GateError("--url", f"{opts.url!r} is not an http(s) URL")
    for name, value, low in (("--repeats", opts.repeats, 1), ("--max-tokens", opts.max_tokens, 2),
                             ("--concurrency", opts.concurrency, 1)):
        if value < low:
            raise GateError(name, f"must be at least {low}, got {value}")
    if not 0 <= opts.tolerance < 1:
        raise GateError("--tolerance", f"must be between 0 and 1 (a fraction), got {opts.tolerance}")
    if opts.target_tok_s is not None and opts.target_tok_s <= 0:
        raise GateError("--target", f"must be > 0, got {opts.target_tok_s}")
    if opts.ready_timeout < 0:
        raise GateError("--ready-timeout", f"must be >= 0, got {opts.ready_timeout}")


def _run(opts: CheckOptions, progress: Progress, report: dict[str, Any],
         transport: httpx.BaseTransport | None = None) -> dict[str, Any]:
    t_start = time.perf_counter()
    _validate(opts)
    warnings: list[str] = []
    if opts.expect_plan is not None:
        plan = opts.expect_plan
    else:
        plan = load_expect(opts.expect, opts.expect_host) if opts.expect else None
    prompts = list(opts.prompts) if opts.prompts else load_prompts()
    headers = {"Authorization": f"Bearer {opts.api_key}"} if opts.api_key else {}
    n = max(1, opts.concurrency)
    timeout = httpx.Timeout(connect=10.0, read=opts.stall_timeout, write=30.0, pool=30.0)
    limits = httpx.Limits(max_connections=n + 4, max_keepalive_connections=n + 4)
    report.update({"url": opts.url, "target_tok_s": opts.target_tok_s, "tolerance": opts.tolerance})
    with httpx.Client(base_url=opts.url.rstrip("/"), headers=headers, timeout=timeout, limits=limits,
                      trust_env=False, transport=transport) as client:
        # 1. ready
        progress(f"waiting for {opts.url} to be ready (up to {opts.ready_timeout:g} s)")
        ready = wait_ready(client, opts.ready_timeout, progress,
                           watch=opts.watch.check if opts.watch is not None else None)
        t_ready = time.perf_counter()
        report["ready"] = ready
        # 2. configured as planned
        info, info_path = read_server_info(client)
        models = list_models(client)
        if opts.model:
            if models is not None and opts.model not in models:
                raise GateError("--model", f"the server does not serve {opts.model!r} (it serves: "
                                           f"{', '.join(models) or 'nothing'})")
            model = opts.model
        elif models:
            model = models[0]
            if len(models) > 1:
                warnings.append(f"the server lists {len(models)} models; measured {model!r} (pick with --model)")
        else:
            model = (info or {}).get("served_model_name") or None
        server = {
            "version": (info or {}).get("version"),
            "model": model,
            "model_path": (info or {}).get("model_path"),
            "server_info_path": info_path,
        }
        report["server"] = server
        comparison = verdict.ConfigComparison()
        if plan is not None:
            if info is None:
                raise GateError("server_info", "the server answers neither /server_info nor /get_server_info: "
                                               "cannot compare its configuration with --expect")
            comparison = verdict.compare_config(plan, info, opts.fail_on)
        elif info is None:
            warnings.append("the server exposes no /server_info: version and accept length unknown")
        report["server_config_diffs"] = [d.as_dict() for d in comparison.diffs]
        # key
        sampler = NvmlSampler((plan or {}).get("gpus", {}).get("indices")) if opts.nvml else None
        if sampler is not None and not sampler.start():
            warnings.append(f"--nvml: {sampler.error}; no GPU samples")
            sampler = None
        hardware = opts.hardware or _hardware_from_plan(plan) or (sampler.hardware if sampler else None)
        key = verdict.make_key(hardware, server["model_path"] or model, server["version"])
        report["key"] = key
        # 3. measure, with the unit watched throughout (a stream broken because the server died
        # reads as the crash, not as the gate's error)
        try:
            with _Watcher(opts.watch) as watcher:
                try:
                    progress(f"warm-up ({model or 'default model'})")
                    shape, _ = negotiate(client, model, prompts[0], min(WARMUP_MAX_TOKENS, opts.max_tokens),
                                         warnings)
                    t_measure = time.perf_counter()
                    single = run_single(client, shape, prompts, opts.repeats, opts.max_tokens, progress,
                                        watcher.cancel)
                    rounds: list[list[RequestFigures]] = []
                    if n > 1:
                        rounds = run_concurrent(client, shape, prompts, n, min(opts.repeats, CONCURRENT_ROUNDS_MAX),
                                                opts.max_tokens, progress, watcher.cancel)
                    measure_s = time.perf_counter() - t_measure
                except (GateError, _Cancelled):
                    watcher.final_check()
                    raise
            watcher.final_check()
        finally:
            if sampler is not None:
                sampler.stop()
        info_after, _ = read_server_info(client) if info is not None else (None, None)
    accept = measure.mean_accept_length(info_after)

    # figures
    decode = measure.spread([r.decode_tok_s for r in single])
    ttft = measure.spread([r.ttft_s for r in single])
    requests = [dict(r.as_dict(), phase="single", index=i) for i, r in enumerate(single)]
    aggregate = None
    concurrent_decode = None
    if rounds:
        aggregate = measure.spread([measure.aggregate_tok_s(rd) for rd in rounds])
        concurrent_decode = measure.spread([r.decode_tok_s for rd in rounds for r in rd])
        for k, rd in enumerate(rounds):
            requests += [dict(r.as_dict(), phase="concurrent", round=k, index=i) for i, r in enumerate(rd)]
    for r in single + [r for rd in rounds for r in rd]:
        warnings.extend(r.warnings)

    # 4. verdict
    baseline_summary = None
    if opts.baseline:
        entries, bw = read_baseline(opts.baseline)
        warnings.extend(bw)
        baseline_summary = verdict.summarize_baseline(entries, key)
        if entries and baseline_summary.best_tok_s is None:
            warnings.append(f"baseline file {opts.baseline} has no passing result for this key "
                            f"({key['hardware']}, {key['model']}, SGLang {key['sglang_version']})")
    result = verdict.decide(decode.median, opts.target_tok_s, baseline_summary, opts.tolerance, comparison.diffs)
    warnings = _dedupe(warnings + comparison.notes)
    t_done = time.perf_counter()
    report.update({
        "verdict": result.verdict,
        "exit_code": 0 if result.passed else 1,
        "decode_tok_s": round(decode.median, 4),
        "decode_tok_s_spread": decode.as_dict(),
        "ttft_s": round(ttft.median, 6),
        "ttft_s_spread": ttft.as_dict(6),
        "itl_ms": measure.itl_summary_ms(single),
        "aggregate_tok_s": round(aggregate.median, 3) if aggregate else None,
        "aggregate_tok_s_spread": aggregate.as_dict(3) if aggregate else None,
        "concurrent_decode_tok_s": round(concurrent_decode.median, 4) if concurrent_decode else None,
        "concurrency": n,
        "accept_length": round(accept, 4) if accept is not None else None,
        "reasons": result.reasons,
        "rules": result.rules,
        "likely_causes": [],
        "warnings": warnings,
        "baseline": dict(baseline_summary.as_dict(), file=opts.baseline,
                         tolerance=opts.tolerance) if baseline_summary else None,
        "requests": requests,
        "settings": {"endpoint": shape.path, "max_tokens": opts.max_tokens, "repeats": opts.repeats,
                     "temperature": 0, "ignore_eos": shape.ignore_eos, "include_usage": shape.include_usage,
                     "prompts": len(prompts), "fail_on": sorted(opts.fail_on)},
        "nvml": None,
        "timing": {
            "ready_s": ready["ready_s"],
            "measure_s": round(measure_s, 3),
            "ready_to_verdict_s": round(t_done - t_ready, 3),
            "overhead_s": round(t_done - t_ready - measure_s, 3),
            "total_s": round(t_done - t_start, 3),
        },
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    })
    explain_slow(report, sampler.samples if sampler is not None else None, plan, info)
    report = _ordered(report)
    if opts.record and opts.baseline:
        try:
            append_baseline(opts.baseline, report)
        except OSError as exc:
            report["warnings"].append(f"--record: cannot append to {opts.baseline}: {exc.strerror or exc}")
    return report


def explain_slow(report: dict[str, Any], samples: Sequence[dict[str, Any]] | None,
                 plan: dict[str, Any] | None = None, info: dict[str, Any] | None = None) -> None:
    """Put the NVML summary of ``samples`` into the report and, when the target or the
    baseline rule failed, the likely causes. Also used by the deploy, whose GPU samples
    come from the host while the gate measured from the controller."""
    nvml_summary = verdict.summarize_nvml(samples) if samples is not None else None
    report["nvml"] = nvml_summary
    slow = any(not r["ok"] for r in report.get("rules") or [] if r["rule"] in ("target", "baseline"))
    if not slow:
        report["likely_causes"] = []
        return
    planned = verdict.plan_intents(plan) if plan else {}
    draft = planned.get("speculative_num_draft_tokens") or (info or {}).get("speculative_num_draft_tokens")
    diffs = [verdict.ConfigDiff(d["field"], d["group"], d["planned"], d["resolved"], d["fails"])
             for d in report.get("server_config_diffs") or []]
    report["likely_causes"] = verdict.likely_causes(nvml_summary, report.get("accept_length"),
                                                    draft if isinstance(draft, int) else None, diffs,
                                                    report.get("warnings") or [])


def sample_gpus(out: str, indices: Sequence[int] | None = None, every_s: float = 0.5,
                until_file: str | None = None, max_seconds: float = 3600.0) -> int:
    """``sglang-deploy sample-gpus``: NVML samples until ``until_file`` exists (or
    ``max_seconds``), written as JSON ``{"samples": [...], "error": ...}`` to ``out``."""
    sampler = NvmlSampler(indices, every_s)
    started = sampler.start()
    t0 = time.monotonic()
    try:
        while started and time.monotonic() - t0 < max_seconds:
            if until_file and Path(until_file).exists():
                break
            time.sleep(0.1)
    finally:
        if started:
            sampler.stop()
    tmp = Path(out + ".tmp")
    tmp.write_text(json.dumps({"samples": sampler.samples, "error": sampler.error}), encoding="utf-8")
    tmp.replace(out)
    return 0 if started else 3


_FIRST = ("verdict", "exit_code", "reasons", "decode_tok_s", "ttft_s", "target_tok_s", "aggregate_tok_s",
          "accept_length", "server_config_diffs", "likely_causes", "warnings", "key", "server", "url")


def _ordered(report: dict[str, Any]) -> dict[str, Any]:
    out = {k: report[k] for k in _FIRST if k in report}
    out.update((k, v) for k, v in report.items() if k not in out)
    return out


# ---------------------------------------------------------------------------
# human output
# ---------------------------------------------------------------------------


def _f(x: Any, nd: int = 1) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def format_report(report: dict[str, Any]) -> str:
    """A short plain-text table."""
    lines: list[str] = []
    srv = report.get("server") or {}
    head = f"sglang-deploy check {report.get('url', '')}"
    if srv:
        head += f"  (SGLang {srv.get('version') or '?'}, model {srv.get('model') or '?'})"
    lines.append(head)
    if report.get("verdict") == "error":
        for w in report.get("warnings") or []:
            lines.append(f"  warning: {w}")
        lines.append("ERROR (could not measure)")
        lines.extend(f"  - {r}" for r in report.get("reasons") or [])
        return "\n".join(lines) + "\n"
    down = report.get("service_failure")
    if down:
        lines.append(f"FAIL: the server did not stay up: {down['unit']}: {down['reason']}")
        if (down.get("journal") or "").strip():
            lines.append("  last journal lines:")
            lines.extend(f"    {line}" for line in down["journal"].rstrip().splitlines())
        return "\n".join(lines) + "\n"
    d, t, itl = report.get("decode_tok_s_spread") or {}, report.get("ttft_s_spread") or {}, report.get("itl_ms")
    rows = [("", "median", "min", "max")]
    rows.append((f"decode tok/s (1 stream, n={d.get('n')})", _f(d.get("median")), _f(d.get("min")),
                 _f(d.get("max"))))
    rows.append(("TTFT ms", _f((t.get("median") or 0) * 1000), _f((t.get("min") or 0) * 1000),
                 _f((t.get("max") or 0) * 1000)))
    if itl:
        rows.append(("ITL ms (p50, p10, p90)", _f(itl["p50"], 2), _f(itl["p10"], 2), _f(itl["p90"], 2)))
    agg = report.get("aggregate_tok_s_spread")
    if agg:
        rows.append((f"aggregate tok/s ({report.get('concurrency')} streams)", _f(agg["median"]),
                     _f(agg["min"]), _f(agg["max"])))
    w0 = max(len(r[0]) for r in rows)
    for r in rows:
        lines.append(f"  {r[0].ljust(w0)}  {r[1].rjust(9)}  {r[2].rjust(9)}  {r[3].rjust(9)}")
    extra = []
    if report.get("accept_length") is not None:
        extra.append(f"accept length {report['accept_length']:.2f}")
    if report.get("target_tok_s") is not None:
        extra.append(f"target {report['target_tok_s']:g} tok/s")
    b = report.get("baseline")
    if b:
        extra.append(f"baseline best {_f(b.get('best_tok_s'))} tok/s ({b.get('passing')} passing of last "
                     f"{b.get('considered')})")
    if extra:
        lines.append("  " + "; ".join(extra))
    for diff in report.get("server_config_diffs") or []:
        lines.append(f"  config: {diff['message']}{'  [fails the gate]' if diff.get('fails') else ''}")
    for w in report.get("warnings") or []:
        lines.append(f"  warning: {w}")
    if report.get("verdict") == "pass":
        lines.append("PASS")
    else:
        lines.append("FAIL")
        lines.extend(f"  - {r}" for r in report.get("reasons") or [])
        for c in report.get("likely_causes") or []:
            lines.append(f"  likely cause: {c}")
    return "\n".join(lines) + "\n"
