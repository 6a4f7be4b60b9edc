"""Hostile files for every reader of `plan`, `tune` and `check`: tuning records, trial files,
--space, --expect, --baseline and the API key file.

Each hand-picked case (``CASES``) is one hostile input through the command's real entry point
(``cli.main``, or the deploy's ``sglang_deploy.deploy.tuning`` reader for a trial file) and is handled when it
ends in one clear error line with the documented exit code (2: bad input), no traceback, no
hang (each runs under an alarm), no terminal control in anything printed and nothing written
where it should not be. Classes: ``trust`` (a file read back trusted only for what it is for),
``bounded`` (bounded readers, FIFOs, huge and deep files, numbers that are not finite),
``print`` (what files and servers say, printed without terminal controls).

Run as a script (``python tests/test_readers_fuzz.py``) it prints how many cases each class
handles, against whatever ``sglang_deploy`` is importable (a worktree of an older commit too).
The Hypothesis tests below fuzz each reader's function directly.
"""

from __future__ import annotations

import http.server
import io
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a worktree: that tree's code
    sys.path.insert(0, str(ROOT))

from sglang_deploy.deploy import tuning as deploy_tuning  # noqa: E402
from sglang_deploy.commands import tune as tuning_run  # noqa: E402
from sglang_deploy.commands import cli  # noqa: E402
from sglang_deploy.errors import PlanError  # noqa: E402
from sglang_deploy.plan import tuning_record as record_mod  # noqa: E402
from sglang_deploy.plan import tuning_record_file as record_file  # noqa: E402
from sglang_deploy.runcontext import RunContext  # noqa: E402

DEAD = "http://127.0.0.1:9"  # discard port: nothing listens
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
ESC = "\x1b[31mRED\x1b]0;owned\x07\x1b[2J"
#: A case still running after this has hung (a FIFO read, a blocked socket); the slowest case that
#: ends (a plan reading a 20,000-trial record) took 20 s on a 2-core machine with two busy loops beside CI.
TIMEOUT_S = 60
DEEP = 10 ** 5


class Unhandled(AssertionError):
    pass


class Timeout(Exception):
    pass


class Contacted(Exception):
    """The tuner went on to run pyinfra against a host: the input was not refused first."""


@dataclass
class Case:
    name: str
    cls: str  # trust | bounded | print
    run: Callable[[Path], None]


CASES: list[Case] = []


def case(cls: str, name: str) -> Callable[[Callable[[Path], None]], Callable[[Path], None]]:
    def add(fn: Callable[[Path], None]) -> Callable[[Path], None]:
        CASES.append(Case(name, cls, fn))
        return fn
    return add


# ---------------------------------------------------------------------------
# running a command and judging it
# ---------------------------------------------------------------------------


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        code = cli.main(list(argv), out=out, err=err)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 2
    except Timeout:
        raise
    except BaseException:  # noqa: BLE001 -- a traceback is the finding
        raise Unhandled("traceback: " + traceback.format_exc(limit=3).splitlines()[-1]) from None
    return code, out.getvalue(), err.getvalue()


def clean(*texts: str) -> None:
    for text in texts:
        if CONTROL.search(text):
            raise Unhandled(f"terminal control printed: {CONTROL.search(text).group()!r}")


def refused(code: int, out: str, err: str, *words: str) -> None:
    """Exit 2, exactly one error line on stderr, no traceback, no terminal control."""
    clean(out, err)
    errors = [line for line in err.splitlines() if line.startswith("error")]
    if code != 2 or len(errors) != 1 or "Traceback" in out + err:
        raise Unhandled(f"exit {code}, stderr {err[-300:]!r}")
    for w in words:
        if w not in errors[0]:
            raise Unhandled(f"{w!r} not named in {errors[0][:200]!r}")


# ---------------------------------------------------------------------------
# fixtures as files: an inventory copy with a record beside it, a tuner's state directory
# ---------------------------------------------------------------------------

HW = {"arch": "sm86", "gpu_model": "RTX A6000", "gpu_count": 2, "topology": "nvlink-pairs",
      "sglang_version": "0.5.23", "model": "Qwen/Qwen3.6-27B", "revision": None}


def good_record(**changes: Any) -> dict[str, Any]:
    rec = {"hardware": dict(HW), "objective": "decode", "concurrency": [1], "slo": {},
           "intents": {"speculative_num_steps": 3},
           "evidence": {"speculative_num_steps": {"value": 3, "objective": 57.1,
                                                  "runner_up": {"value": 2, "objective": 49.8}}},
           "measured_on": "a6000-1", "measured_at": "2026-11-30T20:00:00+00:00", "trial_count": 2,
           "tool_version": "0.1.0",
           "trials": [{"number": 1, "config": {"speculative_num_steps": 2}, "status": "ok", "objective": 49.8,
                       "cause": None, "figures": {"decode_tok_s": 49.8}}]}
    rec.update(changes)
    return rec


def inventory(tmp: Path) -> Path:
    inv = tmp / "inv.py"
    shutil.copy(ROOT / "inventory" / "a6000.py", inv)
    return inv


def plan_with_record(tmp: Path, text: str | None = None, fifo: bool = False) -> tuple[int, str, str]:
    inv = inventory(tmp)
    path = tmp / "inv.tuning.yaml"
    if fifo:
        os.mkfifo(path)
    else:
        path.write_text(text or "")
    return run_cli("plan", str(inv), "--explain")


def record_text(*records: dict[str, Any]) -> str:
    return yaml.safe_dump({"format": 1, "records": list(records)}, sort_keys=False)


def trial(tmp: Path, doc: Any = None, raw: str | None = None, fifo: bool = False, folder: Path | None = None) -> Path:
    folder = folder or tmp
    path = folder / "trial-1.json"
    if fifo:
        os.mkfifo(path)
    else:
        path.write_text(raw if raw is not None else json.dumps(doc))
    return path


def trial_refused(path: Path, *words: str) -> None:
    """The deploy's reader (sglang_deploy/deploy/tuning.py) refuses the trial with one line naming the field."""
    try:
        deploy_tuning.trial_for("a6000-1", RunContext(trial_file=str(path)))
    except PlanError as exc:
        text = str(exc)
        clean(text)
        if "\n" in text:
            raise Unhandled("several lines") from None
        for w in words:
            if w not in text:
                raise Unhandled(f"{w!r} not named in {text[:200]!r}") from None
        return
    except Timeout:
        raise
    except BaseException:  # noqa: BLE001
        raise Unhandled("traceback: " + traceback.format_exc(limit=3).splitlines()[-1]) from None
    raise Unhandled("accepted")


def tune(tmp: Path, *args: str) -> tuple[int, str, str]:
    """`tune` on the inventory copy; running pyinfra at all means the input got through."""
    def contact(*_a: Any, **_k: Any) -> Any:
        raise Contacted()

    saved = tuning_run.Runner.pyinfra
    tuning_run.Runner.pyinfra = contact  # type: ignore[method-assign]
    try:
        try:
            return run_cli("tune", str(inventory(tmp)), "--host", "a6000-1", *args)
        except Unhandled as exc:
            if "Contacted" in str(exc):
                raise Unhandled("a host was contacted with the bad input") from None
            raise
    finally:
        tuning_run.Runner.pyinfra = saved  # type: ignore[method-assign]


def check(*args: str) -> tuple[int, str, str]:
    return run_cli("check", "--url", DEAD, "--ready-timeout", "0", *args)


def alias_bomb() -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


def sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as fh:
        fh.truncate(size)
    return path


# ---------------------------------------------------------------------------
# class trust: read-back files set only what they are for
# ---------------------------------------------------------------------------

# (intent, value, the field the refusal names): a tuned layout is allowed only whole (tp_size with
# dp_size, sglang_deploy/plan/tuning_record.py), so a lone tp_size is refused naming dp_size.
for _name, _value, _field in (("trust_remote_code", True, "trust_remote_code"), ("host", "0.0.0.0", "host"),
                              ("port", 1234, "port"), ("extra_args", ["--trust-remote-code"], "extra_args"),
                              ("model_path", "/evil", "model_path"), ("tp_size", 8, "dp_size")):
    def _record_sets(tmp: Path, name: str = _name, value: Any = _value, field: str = _field) -> None:
        rec = good_record(intents={"speculative_num_steps": 3, name: value})
        refused(*plan_with_record(tmp, record_text(rec)), f"intents.{field}")
    case("trust", f"record intents.{_name}")(_record_sets)

    def _trial_sets(tmp: Path, name: str = _name, value: Any = _value, field: str = _field) -> None:
        trial_refused(trial(tmp, {"hosts": ["a6000-1"], "trial": 1, "intents": {name: value}}), f"intents.{field}")
    case("trust", f"trial intents.{_name}")(_trial_sets)


@case("trust", "record trials[0].config.trust_remote_code")
def _(tmp: Path) -> None:
    rec = good_record(trials=[{"number": 1, "config": {"trust_remote_code": True}, "status": "ok"}])
    refused(*plan_with_record(tmp, record_text(rec)), "trust_remote_code")


@case("trust", "trial top-level extra_args")
def _(tmp: Path) -> None:
    trial_refused(trial(tmp, {"hosts": ["a6000-1"], "trial": 1, "intents": {}, "extra_args": ["--x"]}), "extra_args")


def _report_outside(tmp: Path, report: Callable[[Path, Path], str]) -> None:
    """A trial file in a real state directory naming a report file elsewhere: refused, and the
    deploy's dump (sglang_deploy/deploy/tuning.write_dump, what the gate runs) writes nothing there."""
    outside = tmp / "outside"
    outside.mkdir()
    with tempfile.TemporaryDirectory(prefix="sglang-tune-") as state:
        folder = Path(state)
        path = trial(tmp, {"hosts": ["a6000-1"], "trial": 1, "intents": {},
                           "report_file": report(folder, outside)}, folder=folder)
        try:
            found = deploy_tuning.current_trial("a6000-1", RunContext(trial_file=str(path)))
        except PlanError as exc:
            clean(str(exc))
            if "report_file" not in str(exc):
                raise Unhandled(f"report_file not named: {exc}") from None
            return
        if found is not None:
            deploy_tuning.write_dump(found, None, {"x": 1})
        if list(outside.iterdir()):
            raise Unhandled(f"written outside the state directory: {[p.name for p in outside.iterdir()]}")
        raise Unhandled("report_file outside the state directory accepted")


case("trust", "trial report_file absolute outside")(
    lambda tmp: _report_outside(tmp, lambda folder, outside: str(outside / "r.json")))
case("trust", "trial report_file ../ escape")(
    lambda tmp: _report_outside(tmp, lambda folder, outside: str(folder / ".." / os.path.relpath(outside, folder.parent)
                                                                  / "r.json")))


def _symlinked(folder: Path, outside: Path) -> str:
    (folder / "link").symlink_to(outside)
    return str(folder / "link" / "r.json")


case("trust", "trial report_file through a symlink")(lambda tmp: _report_outside(tmp, _symlinked))


def _json_is(tmp: Path, target: Callable[[Path], str], *extra: str) -> None:
    record = tmp / "inv.tuning.yaml"
    record.write_text(record_text(good_record()))
    before = record.read_bytes()
    refused(*tune(tmp, "--json", target(tmp), *extra), "--json")
    if record.read_bytes() != before:
        raise Unhandled("the record file was changed")


case("trust", "tune --json = the record file")(lambda tmp: _json_is(tmp, lambda t: str(t / "inv.tuning.yaml")))


def _json_link(tmp: Path) -> str:
    (tmp / "link.json").symlink_to(tmp / "inv.tuning.yaml")
    return str(tmp / "link.json")


case("trust", "tune --json = a symlink to the record file")(lambda tmp: _json_is(tmp, _json_link))
case("trust", "tune --json = the record file through ..")(
    lambda tmp: _json_is(tmp, lambda t: str(t / "sub" / ".." / "inv.tuning.yaml")))


def _json_space(tmp: Path) -> None:
    space = tmp / "space.yaml"
    space.write_text("speculative_num_steps: [2, 3]\n")
    _json_is(tmp, lambda t: str(space), "--space", str(space))


case("trust", "tune --json = the --space file")(_json_space)


# ---------------------------------------------------------------------------
# class bounded: bounded readers, FIFOs, huge, deep, not finite, wrong types
# ---------------------------------------------------------------------------

case("bounded", "record alias bomb")(lambda tmp: refused(*plan_with_record(tmp, alias_bomb())))
case("bounded", "record nesting 10^5")(lambda tmp: refused(*plan_with_record(tmp, "[" * DEEP + "]" * DEEP)))
case("bounded", "record 10^5-digit trial_count")(
    lambda tmp: refused(*plan_with_record(tmp, record_text(good_record()).replace("trial_count: 2",
                                                                                   "trial_count: " + "9" * DEEP))))
case("bounded", "record FIFO")(lambda tmp: refused(*plan_with_record(tmp, fifo=True)))


def _record_huge(tmp: Path) -> None:
    inv = inventory(tmp)
    sparse(tmp / "inv.tuning.yaml", 17 * 2 ** 20)
    refused(*run_cli("plan", str(inv)))


case("bounded", "record 17 MiB")(_record_huge)
for _field, _value in (("slo", {"ttft_p90": float("nan")}), ("slo", {"ttft_p90": float("inf")}),
                       ("evidence", {"speculative_num_steps": {"value": 3, "objective": float("nan")}}),
                       ("trials", [{"number": 1, "status": "ok", "objective": float("inf")}]),
                       ("trials", [{"number": 1, "status": "ok", "figures": {"x": float("nan")}}])):
    case("bounded", f"record {_field} not finite {json.dumps(_value)[:40]}")(
        lambda tmp, f=_field, v=_value: refused(*plan_with_record(tmp, record_text(good_record(**{f: v}))), f))
for _field, _value in (("hardware", "x"), ("objective", 3), ("concurrency", "1"), ("slo", []), ("intents", [1]),
                       ("evidence", "x"), ("measured_on", 5), ("measured_at", [1]), ("trial_count", "12"),
                       ("tool_version", {"a": 1}), ("trials", {"a": 1})):
    case("bounded", f"record {_field} of the wrong type")(
        lambda tmp, f=_field, v=_value: refused(*plan_with_record(tmp, record_text(good_record(**{f: v}))), f))
case("bounded", "record 20000 trials")(
    lambda tmp: refused(*plan_with_record(tmp, record_text(good_record(
        trials=[{"number": i, "status": "ok"} for i in range(20000)]))), "trials"))

GOOD_TRIAL = {"hosts": ["a6000-1"], "trial": 1, "intents": {"speculative_num_steps": 3}}
case("bounded", "trial FIFO")(lambda tmp: trial_refused(trial(tmp, fifo=True)))
case("bounded", "trial nesting 10^5")(lambda tmp: trial_refused(trial(tmp, raw="[" * DEEP + "]" * DEEP)))
case("bounded", "trial 10^5-digit number")(
    lambda tmp: trial_refused(trial(tmp, raw=json.dumps(GOOD_TRIAL).replace('"trial": 1', '"trial": ' + "9" * DEEP))))
case("bounded", "trial NaN abandon_below")(
    lambda tmp: trial_refused(trial(tmp, raw=json.dumps({**GOOD_TRIAL, "gate": {"abandon_below": ["decode", 1]}})
                                    .replace("1]", "NaN]"))))
case("bounded", "trial Infinity abandon_below")(
    lambda tmp: trial_refused(trial(tmp, raw=json.dumps({**GOOD_TRIAL, "gate": {"abandon_below": ["decode", 1]}})
                                    .replace("1]", "Infinity]"))))
case("bounded", "trial 2 MiB")(lambda tmp: trial_refused(sparse(tmp / "trial-1.json", 2 * 2 ** 20)))
case("bounded", "trial hosts of the wrong type")(
    lambda tmp: trial_refused(trial(tmp, {**GOOD_TRIAL, "hosts": "a6000-1"}), "hosts"))
case("bounded", "trial concurrency of 10^9")(
    lambda tmp: trial_refused(trial(tmp, {**GOOD_TRIAL, "gate": {"concurrency": [10 ** 9]}}), "concurrency"))


def _space(tmp: Path, text: str | None = None, fifo: bool = False) -> None:
    path = tmp / "space.yaml"
    if fifo:
        os.mkfifo(path)
    else:
        path.write_text(text or "")
    refused(*tune(tmp, "--space", str(path)), "--space")


case("bounded", "--space FIFO")(lambda tmp: _space(tmp, fifo=True))
case("bounded", "--space alias bomb")(lambda tmp: _space(tmp, alias_bomb()))
case("bounded", "--space nesting 10^5")(lambda tmp: _space(tmp, "speculative_num_steps: " + "[" * DEEP + "]" * DEEP))
case("bounded", "--space NaN")(lambda tmp: _space(tmp, "mem_fraction_static: [.nan]\n"))
case("bounded", "--space 10^5-digit value")(lambda tmp: _space(tmp, "chunked_prefill_size: [" + "9" * DEEP + "]\n"))
case("bounded", "--space wrong types")(lambda tmp: _space(tmp, "speculative_num_steps: {values: 3, x: 1}\n"))
case("bounded", "--space trust_remote_code")(lambda tmp: _space(tmp, "trust_remote_code: [true]\n"))


def _file(tmp: Path, name: str, text: str | None = None, fifo: bool = False, size: int | None = None) -> str:
    path = tmp / name
    if fifo:
        os.mkfifo(path)
    elif size is not None:
        sparse(path, size)
    else:
        path.write_text(text or "")
    return str(path)


case("bounded", "--expect FIFO")(lambda tmp: refused(*check("--expect", _file(tmp, "e.json", fifo=True)), "--expect"))
case("bounded", "--expect nesting 10^5")(
    lambda tmp: refused(*check("--expect", _file(tmp, "e.json", "[" * DEEP + "]" * DEEP)), "--expect"))
case("bounded", "--expect NaN")(
    lambda tmp: refused(*check("--expect", _file(tmp, "e.json", '{"host": "h", "sglang_version": NaN}')), "--expect"))
case("bounded", "--expect 10^5-digit number")(
    lambda tmp: refused(*check("--expect", _file(tmp, "e.json", '{"host": ' + "9" * DEEP + "}")), "--expect"))
case("bounded", "--expect 65 MiB")(
    lambda tmp: refused(*check("--expect", _file(tmp, "e.json", size=65 * 2 ** 20)), "--expect"))
case("bounded", "--baseline FIFO")(
    lambda tmp: refused(*check("--baseline", _file(tmp, "b.jsonl", fifo=True)), "--baseline"))
case("bounded", "--baseline 65 MiB")(
    lambda tmp: refused(*check("--baseline", _file(tmp, "b.jsonl", size=65 * 2 ** 20)), "--baseline"))
# lines that are not usable JSON are skipped with a warning: the check goes on (to a dead URL: exit 2)
case("bounded", "--baseline line nested 10^5")(
    lambda tmp: refused(*check("--baseline", _file(tmp, "b.jsonl", "[" * DEEP + "]" * DEEP + "\n{}\n"))))
case("bounded", "--baseline line 10^5-digit number")(
    lambda tmp: refused(*check("--baseline", _file(tmp, "b.jsonl", '{"decode_tok_s": ' + "9" * DEEP + "}\n"))))
case("bounded", "--api-key-file FIFO")(
    lambda tmp: refused(*check("--api-key-file", _file(tmp, "k", fifo=True)), "--api-key-file"))
case("bounded", "--api-key-file 1 MiB")(
    lambda tmp: refused(*check("--api-key-file", _file(tmp, "k", "k" * 2 ** 20)), "--api-key-file"))


# ---------------------------------------------------------------------------
# class print: strings of files and servers reach the terminal without controls
# ---------------------------------------------------------------------------


def _shown_clean(tmp: Path, rec: dict[str, Any]) -> None:
    """A record with terminal escapes (YAML's own \\e escapes): refused with one clean line, or
    shown by plan --explain without them."""
    code, out, err = plan_with_record(tmp, record_text(rec))
    clean(out, err)
    if code not in (0, 2) or "Traceback" in out + err:
        raise Unhandled(f"exit {code}")


for _field, _rec in (
        ("measured_on", good_record(measured_on="a6000-1" + ESC)),
        ("measured_at", good_record(measured_at="2026-11-30" + ESC)),
        ("tool_version", good_record(tool_version="0.1" + ESC)),
        ("trials cause", good_record(trials=[{"number": 1, "status": "infeasible", "cause": "oom" + ESC}])),
        ("evidence runner_up value", good_record(intents={"speculative_algorithm": "NEXTN"}, evidence={
            "speculative_algorithm": {"value": "NEXTN", "objective": 5.0,
                                      "runner_up": {"value": "EAGLE" + ESC, "objective": 4.0}}})),
        ("hardware.sglang_version (a mismatch note)", good_record(hardware={**HW, "sglang_version": "0.5.19" + ESC})),
        ("an unknown key", {**good_record(), "x" + ESC: 1})):
    case("print", f"record {_field} with escapes")(lambda tmp, r=_rec: _shown_clean(tmp, r))


@case("print", "record written with escapes, read back by plan --explain")
def _(tmp: Path) -> None:
    rec = record_mod.TuningRecord(
        hardware=record_mod.HardwareClass(**HW), objective="decode", intents={"speculative_num_steps": 3},
        measured_on="a6000-1" + ESC, measured_at="2026-11-30T20:00:00+00:00", trial_count=1,
        trials=[{"number": 1, "config": {}, "status": "infeasible", "objective": None, "cause": "x" + ESC,
                 "figures": {}}])
    inv = inventory(tmp)
    try:
        record_file.save_record(tmp / "inv.tuning.yaml", rec)
    except record_mod.TuningError as exc:
        clean(str(exc))
        return
    code, out, err = run_cli("plan", str(inv), "--explain")
    clean(out, err)


@case("print", "trial reason with escapes")
def _(tmp: Path) -> None:
    path = trial(tmp, {**GOOD_TRIAL, "reason": "steps" + ESC})
    try:
        got = deploy_tuning.trial_for("a6000-1", RunContext(trial_file=str(path)))
    except PlanError as exc:
        clean(str(exc))
        return
    clean(*(s.reason for s in got.values()))


@case("print", "trial intent name with escapes")
def _(tmp: Path) -> None:
    trial_refused(trial(tmp, {**GOOD_TRIAL, "intents": {"x" + ESC: 1}}))


@case("print", "trial cause from a journal with escapes")
def _(tmp: Path) -> None:
    from sglang_deploy.tuning.trials import outcome_of

    journal = f"Nov 30 20:01:02 host python[812]: RuntimeError: boom{ESC}"
    o = outcome_of({"result": "rolled-back"}, {"outcome": "crashed" + ESC, "summary": "down" + ESC,
                                               "report": {"service_failure": {"journal": journal}}}, "decode")
    clean(o.cause or "", json.dumps(o.figures, ensure_ascii=False))


@case("print", "--expect host names with escapes")
def _(tmp: Path) -> None:
    plans = [{"host": h + ESC, "sglang_version": "0.5.23", "intents": []} for h in ("a", "b")]
    refused(*check("--expect", _file(tmp, "e.json", json.dumps(plans))), "--expect")


@case("print", "server error body with escapes")
def _(tmp: Path) -> None:
    class Hostile(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            body = f"internal error {ESC}\x1b[1A\r\x08".encode()
            self.send_response(500)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        code, out, err = run_cli("check", "--url", f"http://127.0.0.1:{server.server_address[1]}",
                                 "--ready-timeout", "1", "--model", "m")
    finally:
        server.shutdown()
    clean(out, err)
    if code != 2 or "Traceback" in out + err:
        raise Unhandled(f"exit {code}")


# ---------------------------------------------------------------------------
# running the cases
# ---------------------------------------------------------------------------


def _alarm(*_: Any) -> None:
    raise Timeout()


def run_case(c: Case, tmp: Path) -> str | None:
    """None when handled, else why not."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIMEOUT_S)
    try:
        c.run(tmp)
        return None
    except Timeout:
        return f"hung (no answer in {TIMEOUT_S} s)"
    except Unhandled as exc:
        return str(exc)[:300]
    except Exception:  # noqa: BLE001 -- the case's own set-up met the old code's behaviour
        return "traceback: " + traceback.format_exc(limit=2).splitlines()[-1][:300]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("c", CASES, ids=[f"{c.cls}: {c.name}" for c in CASES])
def test_hostile_case_is_handled(c: Case, tmp_path: Path) -> None:
    why = run_case(c, tmp_path)
    assert why is None, why


def main() -> int:
    counts: dict[str, list[int]] = {}
    for c in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            why = run_case(c, Path(tmp))
        counts.setdefault(c.cls, [0, 0])
        counts[c.cls][0] += 1
        counts[c.cls][1] += why is None
        print(f"{'ok  ' if why is None else 'FAIL'} {c.cls:8} {c.name}" + ("" if why is None else f": {why}"))
    print("class     tried  handled")
    for cls, (tried, handled) in counts.items():
        print(f"{cls:8}  {tried:5}  {handled:7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
