"""The continuous check of one SGLang service, run on its GPU host by a systemd timer
(``<service>-watch.timer`` -> ``<service>-watch.service``, Type=oneshot). Standard library only;
run as ``python -I watch.py --config <state_dir>/watch/watch.json`` with the service venv's Python.

Never restarts, stops or writes anything of the service. One run, bounded in time (the unit's
TimeoutStartSec, and a deadline per step below it) and in output:

1. a deploy holding the host's lock (``<state_dir>/deploy.lock``, younger than the deadline it
   names) skips the run: history verdict ``skipped``, ``..._last_skip_timestamp_seconds``; a
   lock past its deadline is ignored, said in the history line's ``why``;
2. the unit (``systemctl show``), the markers ``deployed`` and ``current``;
3. drift against the deployed revision's staged copies: the live unit, env file and nccl.conf
   (sha256), the running process's argv (``/proc/<MainPID>/cmdline``) against the staged unit's
   ``ExecStart`` (parsed below in the quoting the deploy writes, sglang_deploy/unitsyntax.py),
   the SGLang installed in the revision's venv (its ``sglang-*.dist-info``) against the
   revision's ``version`` file and, with a byte budget, a slice of the served snapshot re-hashed
   (``stage_weights.py --verify-served --verify-from --verify-budget-bytes``; a cursor file
   carries the position and the files found bad from run to run);
4. GPU health: ``gpu_health.py`` beside this script (its one JSON line);
5. the gate's single-stream measurement with few tokens and its configuration comparison:
   ``python -I gate.pyz check --options run-options.json`` (the deploy's options for the
   deployed revision with the watch's bounds), against the host's history (gate lines only)
   as the baseline;
6. one line appended to ``<state_dir>/history.jsonl`` and the textfile-collector file
   ``<textfile_dir>/sglang_deploy_<service>.prom`` written atomically (temp file, fsync,
   rename, relative to the directory opened without following a link: a linked directory or
   file is refused and the history line's ``why`` says the metrics were not written), both in
   the shape docs/monitoring.md states.

Exit code 0 whatever the check found (the metrics and the history say it); 2 when the config
file is not one the deploy wrote (nothing is measured or written then).
"""

from __future__ import annotations

import argparse
import datetime
import errno
import glob
import json
import os
import re
import stat
import sys
import time
from typing import TYPE_CHECKING, Any

# The rules the host is judged by, shared with `status` and the alert rules: the package's
# sglang_deploy.hostrules, which the deploy puts beside this script as hostrules.zip (standard
# library only). From a checkout (the tests) the package itself is importable.
_RULES_ZIP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hostrules.zip")
if os.path.isfile(_RULES_ZIP):
    sys.path.insert(0, _RULES_ZIP)
from sglang_deploy.hostrules import gpu as gpu_rules  # noqa: E402
from sglang_deploy.hostrules.metrics import (DRIFT_KEYS, PROM_NAME, metrics_text, number as _number,  # noqa: E402
                                             obj as _obj)

# Its own modules, standard library only: watch_io.py (bounded reads, commands, atomic writes) and
# watch_drift.py (the unit, the running process, drift against the deployed revision), which the
# deploy puts beside it (deploy/watching.py SCRIPTS). Run as a script with ``python -I`` its folder
# is not on sys.path: it puts it first there and imports them by name, writing no __pycache__ into
# the watch folder. From a checkout (the tests, the type check) they are this package's modules.
if TYPE_CHECKING or __package__:
    from .watch_drift import FILE_NAMES, drift_checks, unit_state, weights_check
    from .watch_io import load_json_file, read_small, run, write_atomic
else:
    sys.dont_write_bytecode = True
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from watch_drift import FILE_NAMES, drift_checks, unit_state, weights_check
    from watch_io import load_json_file, read_small, run, write_atomic

CONFIG_FORMAT = "sglang-deploy watch"
CONFIG_VERSION = 1
LOCK_NAME = "deploy.lock"
#: A lock without a readable deadline is honoured this long after it was written.
LOCK_FALLBACK_S = 2 * 3600
#: Whatever it says, a lock older than this is stale (a deploy never holds one a day).
LOCK_MAX_S = 24 * 3600
HEX16 = re.compile(r"[0-9a-f]{16}\Z")
HISTORY_TAIL = 4 << 20  # bytes of history read for the baseline
BASELINE_LINES = 500
MAX_PROBLEMS = 20
#: The prefill prompt's bound (plan/settings.py GATE_PREFILL_TOKENS_MAX, as the deploy gate's).
MAX_PREFILL_TOKENS = 32768


class ConfigError(Exception):
    pass


# -- the config the deploy wrote ---------------------------------------------------

_CONFIG_KEYS = {"format": str, "version": int, "service": str, "state_dir": str, "watch_dir": str,
                "interval_s": int, "timeout_s": int, "max_tokens": int, "repeats": int, "textfile_dir": str,
                "verify_weights_bytes": int, "venvs_dir": str, "live": dict, "python3": str}


def read_config(path: str) -> dict:
    try:
        cfg = load_json_file(path, 1 << 20)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ConfigError(f"{path}: not readable as the watch's config: {exc}") from None
    if not isinstance(cfg, dict) or cfg.get("format") != CONFIG_FORMAT or cfg.get("version") != CONFIG_VERSION:
        raise ConfigError(f"{path}: not a watch config of version {CONFIG_VERSION}")
    for key, kind in _CONFIG_KEYS.items():
        if not isinstance(cfg.get(key), kind) or isinstance(cfg.get(key), bool):
            raise ConfigError(f"{path}: {key} missing or not {kind.__name__}")
    for key in ("state_dir", "watch_dir", "textfile_dir", "venvs_dir", "python3"):
        if not re.fullmatch(r"/[A-Za-z0-9_./@+-]*", cfg[key]) or "/../" in cfg[key] + "/":
            raise ConfigError(f"{path}: {key} is not an absolute path")
    if not re.fullmatch(r"[A-Za-z0-9_.@-]{1,200}", cfg["service"]):
        raise ConfigError(f"{path}: service is not a unit name")
    if set(cfg["live"]) != set(FILE_NAMES) or not all(isinstance(v, str) and v.startswith("/")
                                                      for v in cfg["live"].values()):
        raise ConfigError(f"{path}: live must name the unit, env and nccl_conf paths")
    for key, low, high in (("interval_s", 1, 86400), ("timeout_s", 1, 3600), ("max_tokens", 2, 256),
                           ("repeats", 1, 10), ("verify_weights_bytes", 0, 1 << 40)):
        if not low <= cfg[key] <= high:
            raise ConfigError(f"{path}: {key} out of range")
    # the prefill measurement's prompt (0: none); a config written before it had none
    prefill = cfg.setdefault("prefill_tokens", 0)
    if not isinstance(prefill, int) or isinstance(prefill, bool) or not 0 <= prefill <= MAX_PREFILL_TOKENS:
        raise ConfigError(f"{path}: prefill_tokens out of range")
    return cfg


# -- the deploy's lock ------------------------------------------------------------------


def lock_state(path: str, now: float) -> tuple[bool, str | None]:
    """(held, note): held while the lock exists and its deadline (``expires=`` in it, else
    LOCK_FALLBACK_S after it was written, never more than LOCK_MAX_S) has not passed; a stale
    lock is not held and the note says so. The lock is the deploy's: this never removes it."""
    try:
        st = os.lstat(path)
    except OSError:
        return False, None
    text = read_small(path, 512) or ""
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    expires = started = None
    try:
        started = float(fields["started"])
        expires = float(fields["expires"])
    except (KeyError, ValueError):
        pass
    written = started if started is not None and abs(started - st.st_mtime) < 3600 else st.st_mtime
    deadline = expires if expires is not None and expires >= written else written + LOCK_FALLBACK_S
    deadline = min(deadline, written + LOCK_MAX_S)
    if now <= deadline:
        return True, f"a deploy holds the host's lock since {_iso(written)}"
    return False, f"a stale deploy lock from {_iso(written)} (past its deadline {_iso(deadline)}) was ignored"


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(timespec="seconds")


# -- GPU health ---------------------------------------------------------------------


def gpu_health(cfg: dict, pid: int | None, seconds: float) -> tuple[dict | None, list[Any]]:
    """gpu_health.py's JSON (docs/monitoring.md) and its problems (``gpu_rules.Finding``)."""
    script = os.path.join(cfg["watch_dir"], "gpu_health.py")
    if not os.path.isfile(script):
        return None, []
    args = [script] + (["--server-pid", str(pid)] if pid else []) + ["--kernel-log", "auto"]
    health: Any = None
    # The host's python3 first (where the deploy's GPU probe finds pynvml), then the venv's (SGLang
    # depends on nvidia-ml-py).
    for python in (cfg["python3"], sys.executable):
        code, out = run([python, "-I", *args], seconds)
        try:
            health = json.loads(out.strip().splitlines()[-1]) if out.strip() else None
        except ValueError:
            health = None
        if isinstance(health, dict) and isinstance(health.get("gpus"), list) and health["gpus"]:
            break
    if not isinstance(health, dict):
        return {"error": "gpu_health.py gave no answer", "gpus": []}, []
    return health, health_problems(health)


def health_problems(health: dict) -> list[Any]:
    """The GPU problems, judged as `status` and the alert rules judge them (``sglang_deploy.hostrules.gpu``);
    NVML that cannot be read is a note (check()), not a problem."""
    return gpu_rules.problems(gpu_rules.findings(health))[:MAX_PROBLEMS]


# -- the measurement ----------------------------------------------------------------


def baseline_file(cfg: dict) -> str:
    """The host's gate lines (the newest BASELINE_LINES) in a file of their own: the gate's
    baseline, without the watch's own lines crowding them out."""
    path = os.path.join(cfg["state_dir"], "history.jsonl")
    out = os.path.join(cfg["watch_dir"], "baseline.jsonl")
    lines: list[bytes] = []
    try:
        fd = _open_history(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            os.lseek(fd, max(0, size - HISTORY_TAIL), os.SEEK_SET)
            data = os.read(fd, HISTORY_TAIL)
        finally:
            os.close(fd)
        lines = [line for line in data.splitlines() if b'"kind":"gate"' in line][-BASELINE_LINES:]
    except OSError:
        pass
    write_atomic(out, b"".join(line + b"\n" for line in lines), 0o600)
    return out


def options_for(cfg: dict, ref: str | None, notes: list[str]) -> str | None:
    """The run's gate options: the deploy's for the deployed revision (else the newest it wrote,
    without its plan: no configuration comparison then), with the watch's bounds."""
    wdir = cfg["watch_dir"]
    path = os.path.join(wdir, f"gate-{ref}.json") if ref else None
    if path is None or not os.path.isfile(path):
        candidates = sorted(glob.glob(os.path.join(glob.escape(wdir), "gate-*.json")), key=os.path.getmtime)
        if not candidates:
            notes.append("no gate options from the deploy")
            return None
        path = candidates[-1]
        notes.append(f"no gate options for revision {ref}: measured without the configuration comparison")
        plan = False
    else:
        plan = True
    opts: Any
    try:
        opts = load_json_file(path)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        notes.append(f"gate options unreadable: {exc}")
        return None
    if not isinstance(opts, dict):
        notes.append("gate options are not an object")
        return None
    budget = cfg["timeout_s"]
    opts.update({"baseline": baseline_file(cfg), "record": False, "nvml": False, "concurrency": 1,
                 "repeats": cfg["repeats"], "max_tokens": cfg["max_tokens"], "abort_file": None,
                 "ready_timeout": float(min(30, budget / 4)), "stall_timeout": float(min(20, budget / 6)),
                 "slo": {}, "abandon_below": None})
    if not plan:
        opts["expect_plan"] = None
    if cfg["prefill_tokens"] and opts.get("role") != "prefill":  # a prefill server's own length stands
        opts["prefill_tokens"] = cfg["prefill_tokens"]
    run_path = os.path.join(wdir, "run-options.json")
    write_atomic(run_path, json.dumps(opts, sort_keys=True).encode(), 0o600)
    return run_path


def measure(cfg: dict, options: str, deadline: float) -> dict[str, Any]:
    wdir = cfg["watch_dir"]
    report_path = os.path.join(wdir, "report.json")
    try:
        os.unlink(report_path)
    except OSError:
        pass
    seconds = deadline - time.monotonic()
    code, _ = run([sys.executable, "-I", os.path.join(wdir, "gate.pyz"), "check", "--options", options, "--json",
                   report_path], seconds)
    report: Any
    try:
        report = load_json_file(report_path)
    except (ValueError, UnicodeDecodeError, RecursionError):
        report = None
    if not isinstance(report, dict):
        why = "the measurement ran out of time" if code is None else f"the gate left no report (exit {code})"
        return {"verdict": "error", "reasons": [why]}
    return report


# -- output: history line and textfile ------------------------------------------------------


def history_line(state: dict, verdict: str, why: str | None, drift: list[str], problems: list[Any],
                 duration: float, measured: str | None = None) -> str:
    """The run's line of the host's history. Beside the verdict and why, what it rests on, for
    `status` to hold against its own read: ``drift`` (what differed), ``gpu_problems`` (sentences)
    with ``gpu_keys`` (what stays the same while each stands: ``gpu_rules.Finding.key``), and
    ``measured``, the measurement's own verdict (pass | fail | error)."""
    skipped = verdict == "skipped"
    deployed = state.get("deployed")  # a skip's state is the last run's last.json, whatever it holds now
    entry = {"kind": "watch", "time": _iso(time.time()), "service": state["service"],
             "revision": deployed if isinstance(deployed, str) and HEX16.match(deployed) else None,
             "verdict": verdict, "why": why[:500] if why else None,
             "decode_tok_s": None if skipped else state.get("decode_tok_s"),
             "prefill_tok_s": None if skipped else state.get("prefill_tok_s"),
             "baseline_tok_s": None if skipped else state.get("baseline_tok_s"),
             "target_tok_s": None if skipped else state.get("target_tok_s"),
             "drift": drift, "gpu_problems": [f.text for f in problems[:MAX_PROBLEMS]],
             "gpu_keys": [f.key for f in problems[:MAX_PROBLEMS]], "measured": measured,
             "duration_s": round(duration, 3)}
    return json.dumps(entry, separators=(",", ":"), sort_keys=True)


def _open_history(path: str, flags: int) -> int:
    """The history file opened without following a link and without blocking (a FIFO put there
    opens at once, or fails), refused (OSError) unless it is a regular file."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, f"{path} is not a regular file")
    return fd


def append_history(cfg: dict, line: str) -> None:
    """One write with O_APPEND: a whole line, whatever else appends (the deploy's gate)."""
    fd = _open_history(os.path.join(cfg["state_dir"], "history.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


#: The history is trimmed once it passes HISTORY_TRIM_BYTES: the oldest of the check's own lines go
#: (one per interval, the only frequent writer), the last WATCH_KEEP of them and every other line
#: (the deploy's gates, which the baseline reads) stay. A file past HISTORY_READ_MAX is read from
#: its last HISTORY_READ_MAX bytes only, so a run's work stays bounded.
HISTORY_TRIM_BYTES = 8 << 20
HISTORY_READ_MAX = 64 << 20
WATCH_KEEP = 2000


def _is_watch_line(line: bytes) -> bool:
    return line.startswith(b'{') and (b'"kind":"watch"' in line or b'"kind": "watch"' in line)


def trim_history(cfg: dict, lock: str) -> int:
    """Trim the history (see HISTORY_TRIM_BYTES); the number of lines dropped. Not while a deploy
    holds the lock, since its gate appends to the same file and a rename would lose that line."""
    path = os.path.join(cfg["state_dir"], "history.jsonl")
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    size = st.st_size
    if not stat.S_ISREG(st.st_mode) or size <= HISTORY_TRIM_BYTES or lock_state(lock, time.time())[0]:
        return 0
    with open(path, "rb") as fh:
        if size > HISTORY_READ_MAX:
            fh.seek(size - HISTORY_READ_MAX)
            fh.readline()  # a part of a line
        lines = fh.read().splitlines(keepends=True)
    watch_at = [i for i, line in enumerate(lines) if _is_watch_line(line)]
    drop = set(watch_at[:-WATCH_KEEP]) if len(watch_at) > WATCH_KEEP else set()
    if not drop and size <= HISTORY_READ_MAX or lock_state(lock, time.time())[0]:
        return 0
    kept = [line for i, line in enumerate(lines) if i not in drop]
    write_atomic(path, b"".join(kept), 0o600)
    return len(lines) - len(kept)


def publish(cfg: dict, state: dict) -> str | None:
    """The state (``last.json``) and the metrics written; what could not be written, in words (for
    the history line's ``why`` and the journal), else None. The textfile directory is opened part by
    part without following a link and the file written relative to it (watch_io.write_atomic): a
    linked directory or file there is refused, never written through."""
    failed = []
    try:
        write_atomic(os.path.join(cfg["watch_dir"], "last.json"), json.dumps(state, sort_keys=True).encode(), 0o600)
    except OSError as exc:
        failed.append(f"state not written: {exc.strerror or exc}")
    prom = os.path.join(cfg["textfile_dir"], PROM_NAME.format(service=cfg["service"]))
    try:
        write_atomic(prom, metrics_text(state).encode(), 0o644, create_dir=True)
    except OSError as exc:
        failed.append(f"metrics not written to {prom}: {exc.strerror or exc}")
    for text in failed:
        print(f"watch: {text}", file=sys.stderr)
    return "; ".join(failed) or None


# -- one run ---------------------------------------------------------------------------


def previous_state(cfg: dict) -> dict[str, Any]:
    state: Any
    try:
        state = load_json_file(os.path.join(cfg["watch_dir"], "last.json"), 1 << 20)
    except (ValueError, UnicodeDecodeError, RecursionError):
        state = {}
    if not isinstance(state, dict) or state.get("service") != cfg["service"]:
        state = {}
    state.update({"service": cfg["service"], "interval_s": cfg["interval_s"]})
    return state


def marker(cfg: dict, name: str) -> str | None:
    text = read_small(os.path.join(cfg["state_dir"], name), 64)
    return text if text and HEX16.match(text) else None


def check(cfg: dict) -> tuple[str, dict[str, Any]]:
    """One run; returns (its history line, its state)."""
    t0, m0 = time.time(), time.monotonic()
    deadline = m0 + cfg["timeout_s"] - 5
    state = previous_state(cfg)
    lock = os.path.join(cfg["state_dir"], LOCK_NAME)
    held, lock_note = lock_state(lock, t0)
    if held:
        state["last_skip"] = round(time.time(), 3)
        unwritten = publish(cfg, state)
        return history_line(state, "skipped", "; ".join(filter(None, (lock_note, unwritten))), [], [],
                            time.monotonic() - m0), state
    notes = [lock_note] if lock_note else []
    unit = unit_state(f"{cfg['service']}.service")
    deployed, running = marker(cfg, "deployed"), marker(cfg, "current")
    ref = deployed or running
    drift_flags, installed = drift_checks(cfg, ref, unit, notes)
    if cfg["verify_weights_bytes"] > 0:
        drift_flags["weights"] = weights_check(cfg, m0 + cfg["timeout_s"] / 3, notes)
    health, problems = gpu_health(cfg, unit["pid"], max(5.0, min(30.0, deadline - time.monotonic())))
    if health is not None and health.get("error"):
        notes.append(f"GPU health not read: {str(health['error'])[:200]}")
    options = options_for(cfg, ref, notes)
    report = measure(cfg, options, deadline) if options else {"verdict": "error",
                                                               "reasons": ["nothing to measure with"]}
    if lock_state(lock, time.time())[0]:  # a deploy began meanwhile: what was measured is not the service's
        state["last_skip"] = round(time.time(), 3)
        unwritten = publish(cfg, state)
        return history_line(state, "skipped", "; ".join(filter(None, ("a deploy took the host's lock during the check",
                                                                      unwritten))), [], [],
                            time.monotonic() - m0), state
    gate_verdict = report.get("verdict") if report.get("verdict") in ("pass", "fail") else "error"
    baseline = _obj(report.get("baseline"))
    drift = [k for k in DRIFT_KEYS if drift_flags[k]]
    state.update({
        "last_run": None, "check_success": gate_verdict == "pass",
        "service_up": unit["active"] == "active" and unit["sub"] == "running",
        "decode_tok_s": _number(report.get("decode_tok_s")),
        "prefill_tok_s": _number(report.get("prefill_tok_s")),
        "baseline_tok_s": _number(baseline.get("best_tok_s")),
        "target_tok_s": _number(report.get("target_tok_s")),
        "tolerance": _number(report.get("tolerance")),
        "drift": drift, "deployed": deployed, "running": running, "sglang_version": installed,
        "health": health, "cost": cost_of(report),
    })
    reasons = [str(r)[:300] for r in report.get("reasons") or [] if isinstance(r, (str, int, float))][:5]
    why_parts = ([f"drift: {', '.join(drift)}"] if drift else []) + reasons + [f.text for f in problems[:5]] + notes[:5]
    if gate_verdict == "error":
        verdict = "error"
    elif gate_verdict == "fail" or drift or problems:
        verdict = "fail"
    else:
        verdict = "pass"
    if verdict == "error" and not state["service_up"]:
        why_parts.insert(0, f"{cfg['service']}.service is {unit['active'] or 'unknown'}")
    duration = time.monotonic() - m0
    state["last_run"], state["duration_s"] = round(time.time(), 3), round(duration, 3)
    unwritten = publish(cfg, state)
    if unwritten:  # first: the history line's why is bounded
        why_parts.insert(0, unwritten)
    line = history_line(state, verdict, "; ".join(why_parts) or None, drift, problems, duration, str(gate_verdict))
    return line, state


def cost_of(report: dict) -> dict:
    """What the run asked of the server: generation requests (the warm-up and the measured ones)
    and their completion tokens (the measured ones from the report; the warm-up's at most its cap)."""
    requests = [r for r in report.get("requests") or [] if isinstance(r, dict)]
    tokens = sum(r["completion_tokens"] for r in requests if isinstance(r.get("completion_tokens"), int))
    return {"generation_requests": len(requests) + (1 if requests else 0), "measured_tokens": tokens}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="the watch's config (JSON the deploy wrote)")
    args = parser.parse_args(argv)
    try:
        cfg = read_config(args.config)
    except ConfigError as exc:
        print(f"watch: {exc}", file=sys.stderr)
        return 2
    os.umask(0o077)
    line, state = check(cfg)
    try:
        append_history(cfg, line)
        trim_history(cfg, os.path.join(cfg["state_dir"], LOCK_NAME))
    except OSError as exc:  # the metrics are written; the journal says why the history is not
        print(f"watch: history not written: {exc.strerror or exc}", file=sys.stderr)
    usage = os.times()
    entry = json.loads(line)
    text = (f"watch: {entry['verdict']}"
            + (f" {entry['decode_tok_s']:.1f} tok/s" if isinstance(entry.get("decode_tok_s"), float) else "")
            + (f"; {entry['why']}" if entry.get("why") else "")
            + f"; cost: {usage.user + usage.system + usage.children_user + usage.children_system:.2f} CPU s, "
              f"{json.dumps(state.get('cost') or {}, sort_keys=True)}")
    # The why may quote what a host's file held (a lone surrogate from a JSON escape): printed as
    # escapes, never a UnicodeEncodeError after the history line was written.
    print("".join(c if c.isprintable() else ascii(c)[1:-1] for c in text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
