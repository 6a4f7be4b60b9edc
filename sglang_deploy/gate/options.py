"""What one gate run is asked to do (``sglang-deploy check`` and the deploy's gate), and
the checks on those options that need no server.

Every default of a gate run is written once, here: the dataclass's field defaults
(``default(name)`` reads them for the ``check`` command's parser and the settings table).
The deploy hands a run to the gate on a GPU host as an options file (``to_file_dict``,
read back by ``from_file_dict``): JSON with a format name and version, the options that
travel as plain values, and the references the gate resolves on its host (the API key's
file, the unit to watch, the abort file); never a secret itself."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence
from urllib.parse import urlsplit

from sglang_deploy.gate import load, verdict
from sglang_deploy.gate.errors import GateError
from sglang_deploy.gate.scrub import redact_url
from sglang_deploy.untrusted import shown


class UnitWatch(Protocol):
    """The server's unit, read during the gate (``watch.SystemdWatch``): ``check`` raises
    ``ServiceDown`` once the unit failed or restarted."""

    every_s: float

    def check(self, force: bool = False) -> None: ...


@dataclass
class CheckOptions:
    url: str
    target_tok_s: float | None = None
    baseline: str | None = None
    tolerance: float = 0.10
    # one level, or several (``--concurrency 1,8,32``); level 1 is the single-stream run, and
    # the report's aggregate_tok_s / concurrency are the highest level's
    concurrency: int | tuple[int, ...] = 1
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
    watch: UnitWatch | None = field(default=None, repr=False)
    # service-level objectives, ``<metric>_p<q>`` (metric ttft|itl|tpot|e2e, q 50|90|99) -> seconds
    slo: dict[str, float] = field(default_factory=dict)
    # (objective decode|throughput|goodput, value): stop measuring once an optimistic bound of the
    # objective from the requests so far is below the value (a tuning trial that cannot win)
    abandon_below: tuple[str, float] | None = None
    # The operator's reason to accept a result slower than its baseline (an upgrade known to be
    # slower): a baseline rule that would fail passes, its detail and the report saying why.
    # Never a missed target or a configuration difference. Printable, one line, bounded
    # (``verdict.accept_slower_problem``); it travels in the options file, never in argv.
    accept_slower: str | None = None
    # With the plan's predicted band (``expect``/``expect_plan``: its ``predicted``) and neither a
    # target nor a baseline: a decode rate below this fraction of the band's low end fails
    # (``gate.predicted``); 0 turns that off. Every published single-stream measurement of
    # tests/fixtures/perf/published.yaml that the model predicts is at least 0.82 of its predicted
    # low end (benchmarks/predict_published.py; tests/test_predict_published.py keeps it above
    # this floor), and the low end already assumes the worst efficiency.
    prediction_floor: float = 0.7
    # Prefill: after the decode run, PREFILL_REQUESTS requests (and a warm-up) of a long prompt of
    # about this many tokens, one output token each; input tok/s = the server's prompt tokens /
    # TTFT (``gate.prefill``). 0 (check's default): not measured. The deploy's gate measures
    # 2,048 unless ``sglang_gate.prefill_tokens`` says otherwise (plan/settings.py).
    prefill_tokens: int = 0
    # Seconds the levels above 1 and the prefill may add to the single-stream run (None: no bound,
    # check's default): a further round of a level (the levels share CONCURRENCY_SHARE of it, gate/run.py)
    # or prefill request is sent only while one as long as the last still ends within it; at least
    # one round and one measured prefill request always are. The deploy's gate: 20 s (plan/settings.py).
    added_budget_s: float | None = None
    # A server of a disaggregated fleet (SGLang --disaggregation-mode): every request carries SGLang's
    # fake bootstrap host (no KV transfer: gate.client.RequestShape). A decode server is measured as
    # any; a prefill server answers one token per request, so it is measured and judged by its
    # prefill alone (prefill_tokens must be > 0), not by a decode rate it does not have.
    role: str | None = None

    @property
    def levels(self) -> tuple[int, ...]:
        """The concurrency levels measured, ascending, 1 always among them."""
        return load.levels(self.concurrency)


#: Upper bounds that catch a typo (an extra digit) before it turns into a gate that
#: runs for days; generous for any real measurement.
LIMITS = {"--repeats": 1000, "--max-tokens": 1 << 20, "--concurrency": 1024, "--prefill-tokens": 32768}
MAX_SECONDS = 7 * 24 * 3600.0
#: ``role``: the server roles of a disaggregated fleet.
ROLES = ("prefill", "decode")

#: Each option's name on ``check``'s command line (sglang_deploy/commands/cli.py), as errors name it.
FLAGS = {"url": "--url", "target_tok_s": "--target", "baseline": "--baseline", "tolerance": "--tolerance",
         "concurrency": "--concurrency", "model": "--model", "expect": "--expect", "expect_host": "--host",
         "fail_on": "--fail-on", "ready_timeout": "--ready-timeout", "repeats": "--repeats",
         "max_tokens": "--max-tokens", "hardware": "--hardware", "nvml": "--nvml", "stall_timeout": "--stall-timeout",
         "record": "--record", "slo": "--slo", "abandon_below": "abandon_below", "api_key_file": "--api-key-file",
         "watch_unit": "--watch-unit", "abort_file": "--abort-file", "accept_slower": "--accept-slower",
         "prediction_floor": "--prediction-floor", "prefill_tokens": "--prefill-tokens", "role": "--role"}

_FIELDS = {f.name: f for f in dataclasses.fields(CheckOptions)}


def default(name: str) -> Any:
    """The default of one option (a field of CheckOptions): the one place it is written."""
    f = _FIELDS[name]
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise KeyError(f"{name} has no default")


#: Raises the error for one option: (field, message) -> GateError.
Complaint = Callable[[str, str], GateError]


def _flag_error(name: str, message: str) -> GateError:
    return GateError(FLAGS.get(name, name), message)


def validate(opts: CheckOptions, error: Complaint = _flag_error) -> None:
    """Raise GateError naming the option when one is out of range, empty or, for the URL,
    not parsable. (The files it names: ``files.check_files``.) ``error`` makes the error
    for a field: named by its ``check`` flag unless told otherwise (an options file names
    its keys)."""
    _validate_url(opts.url, error)
    _validate_numbers(opts, error)
    for name in ("model", "expect", "expect_host", "baseline", "hardware"):
        value = getattr(opts, name)
        if value is not None and not str(value).strip():
            raise error(name, "is empty")
    if opts.accept_slower is not None:
        problem = verdict.accept_slower_problem(opts.accept_slower)
        if problem:
            raise error("accept_slower", problem)


def _validate_url(url: str, error: Complaint) -> None:
    shown_url = redact_url(url)
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        raise error("url", f"{shown_url!r} holds white space or control characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError for a port that is not a number in range
    except ValueError as exc:
        raise error("url", f"{shown_url!r} is not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise error("url", f"{shown_url!r} is not an http(s) URL")
    if not parts.hostname:
        raise error("url", f"{shown_url!r} names no host")


def _finite(value: Any) -> bool:
    """A real number (not a bool) that is finite as a float: an integer of hundreds of digits is
    not (math.isfinite would raise OverflowError on it), nor is NaN or infinity."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _validate_numbers(opts: CheckOptions, error: Complaint) -> None:
    conc = opts.concurrency if isinstance(opts.concurrency, (tuple, list)) else (opts.concurrency,)
    if not conc:
        raise error("concurrency", "names no level")
    for name, value, low in (("repeats", opts.repeats, 1), ("max_tokens", opts.max_tokens, 2),
                             ("prefill_tokens", opts.prefill_tokens, 0), *(("concurrency", c, 1) for c in conc)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise error(name, f"must be a whole number, got {shown(value)}")
        if value < low:
            raise error(name, f"must be at least {low}, got {shown(value)}")
        top = LIMITS[FLAGS[name]]
        if value > top:
            raise error(name, f"must be at most {top}, got {shown(value)}")
    # every number below is checked finite (an integer of hundreds of digits is not) before it is compared
    if not (_finite(opts.tolerance) and 0 <= opts.tolerance < 1):
        raise error("tolerance", f"must be between 0 and 1 (a fraction), got {shown(opts.tolerance)}")
    if not (_finite(opts.prediction_floor) and 0 <= opts.prediction_floor < 1):
        raise error("prediction_floor",
                    f"must be between 0 and 1 (a fraction; 0: off), got {shown(opts.prediction_floor)}")
    if opts.target_tok_s is not None and not (_finite(opts.target_tok_s) and opts.target_tok_s > 0):
        raise error("target_tok_s", f"must be a finite number > 0, got {shown(opts.target_tok_s)}")
    budget = opts.added_budget_s
    if budget is not None and not (_finite(budget) and 0 < budget <= MAX_SECONDS):
        raise error("added_budget_s", f"must be > 0 and at most {MAX_SECONDS:g} s, got {shown(opts.added_budget_s)}")
    if not (_finite(opts.ready_timeout) and 0 <= opts.ready_timeout <= MAX_SECONDS):
        raise error("ready_timeout", f"must be between 0 and {MAX_SECONDS:g} s, got {shown(opts.ready_timeout)}")
    if isinstance(opts.slo, dict):
        for key, limit in opts.slo.items():
            if not isinstance(limit, bool) and isinstance(limit, (int, float)) and not _finite(limit):
                raise error("slo", f"{shown(key)}: the limit must be a finite number of seconds, got {shown(limit)}")
    try:
        load.check_slo(opts.slo)
    except (ValueError, AttributeError) as exc:
        raise error("slo", str(exc)) from None
    _validate_abandon(opts, error)
    if opts.role not in (None, *ROLES):
        raise error("role", f"must be prefill or decode, got {shown(opts.role)}")
    if opts.role == "prefill" and opts.prefill_tokens <= 0:
        raise error("role", "a prefill server answers one token per request: it is measured by its prefill "
                            "(set prefill_tokens)")
    if not (_finite(opts.stall_timeout) and 0 < opts.stall_timeout <= MAX_SECONDS):
        raise error("stall_timeout", f"must be > 0 and at most {MAX_SECONDS:g} s, got {shown(opts.stall_timeout)}")


def _validate_abandon(opts: CheckOptions, error: Complaint) -> None:
    if opts.abandon_below is None:
        return
    try:
        objective, value = opts.abandon_below
    except (TypeError, ValueError):
        raise error("abandon_below", f"must be (objective, value), got {opts.abandon_below!r}") from None
    if objective not in load.OBJECTIVES:
        raise error("abandon_below", f"unknown objective {objective!r}; known: {', '.join(load.OBJECTIVES)}")
    if not _finite(value):
        raise error("abandon_below", f"the threshold must be a finite number, got {shown(value)}")
    if objective == "goodput" and not opts.slo:
        raise error("abandon_below", "the goodput objective needs SLOs (--slo)")


# ---------------------------------------------------------------------------
# the options file: what the deploy hands to the gate on a GPU host
# ---------------------------------------------------------------------------

FILE_FORMAT = "sglang-deploy gate options"
FILE_VERSION = 1


@dataclass(frozen=True)
class HostRefs:
    """What the gate resolves on its own host, named in the options file instead of sent:
    the API key's file (0600, beside the options; the key itself is never in the options
    file), the systemd unit to watch and the file whose appearance fails the gate (rank 0
    of a multi-node group)."""

    api_key_file: str | None = None
    watch_unit: str | None = None
    abort_file: str | None = None


#: The largest number an options file's key may hold (in size): every option is far below it, and an
#: integer of hundreds of digits is refused naming its key before float() or math.isfinite() would
#: overflow on it.
MAX_FILE_NUMBER = 10 ** 15


def _too_large(v: Any) -> bool:
    """Whether ``v``, or a member of ``v`` (a list of levels, an object of SLOs), is an integer
    past MAX_FILE_NUMBER in size (a float past it is finite or not: ``validate``'s ranges judge it)."""
    members = v.values() if isinstance(v, dict) else v if isinstance(v, list) else (v,)
    return any(isinstance(x, int) and not isinstance(x, bool) and abs(x) > MAX_FILE_NUMBER for x in members)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_levels(v: Any) -> bool:
    return _is_whole(v) or (isinstance(v, list) and bool(v) and all(_is_whole(c) for c in v))


def _is_groups(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(g, str) and g in verdict.DIFF_GROUPS for g in v)


def _is_slo(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and _is_number(x) for k, x in v.items())


def _is_abandon(v: Any) -> bool:
    return isinstance(v, list) and len(v) == 2 and isinstance(v[0], str) and _is_number(v[1])


_TEXT = ("text", lambda v: isinstance(v, str))
_NUMBER = ("a number", _is_number)
_WHOLE = ("a whole number", _is_whole)
_BOOL = ("true or false", lambda v: isinstance(v, bool))
#: The keys of an options file besides format and version: what each holds, its check, and
#: how the value becomes the option (None: as it is). A key whose option defaults to None
#: may be null. What is not here never travels: the API key, the watch object, the prompts.
_FILE_FIELDS: dict[str, tuple[str, Callable[[Any], bool], Callable[[Any], Any] | None]] = {
    "url": (*_TEXT, None),
    "target_tok_s": (*_NUMBER, float),
    "baseline": (*_TEXT, None),
    "tolerance": (*_NUMBER, float),
    "concurrency": ("a whole number or a non-empty list of them", _is_levels,
                    lambda v: v if isinstance(v, int) else tuple(v)),
    "model": (*_TEXT, None),
    "expect": (*_TEXT, None),
    "expect_host": (*_TEXT, None),
    "fail_on": (f"a list of groups among {', '.join(verdict.DIFF_GROUPS)}", _is_groups, frozenset),
    "ready_timeout": (*_NUMBER, float),
    "repeats": (*_WHOLE, None),
    "max_tokens": (*_WHOLE, None),
    "hardware": (*_TEXT, None),
    "nvml": (*_BOOL, None),
    "stall_timeout": (*_NUMBER, float),
    "record": (*_BOOL, None),
    "expect_plan": ("an object (a plan of 'sglang-deploy plan --json')", lambda v: isinstance(v, dict), None),
    "slo": ("an object of <metric>_p<q> -> seconds", _is_slo, dict),
    "abandon_below": ("[objective, value]", _is_abandon, tuple),
    "accept_slower": (*_TEXT, None),
    "prediction_floor": (*_NUMBER, float),
    "prefill_tokens": (*_WHOLE, None),
    "added_budget_s": (*_NUMBER, float),
    "role": ("prefill or decode", lambda v: v in ROLES, None),
}
#: The options whose default is None: null in the file.
_NULLABLE = frozenset(name for name in _FILE_FIELDS if _FIELDS[name].default is None)
_REF_FIELDS = tuple(f.name for f in dataclasses.fields(HostRefs))
FILE_KEYS = ("format", "version", *_FILE_FIELDS, *_REF_FIELDS)


def to_file_dict(opts: CheckOptions, refs: HostRefs = HostRefs()) -> dict[str, Any]:
    """The options file's object for ``opts`` (JSON-ready): every option that travels as a
    value, and ``refs``; the API key and the watch object are left out (``refs`` names the
    key's file and the unit)."""
    out: dict[str, Any] = {"format": FILE_FORMAT, "version": FILE_VERSION}
    for name in _FILE_FIELDS:
        value = getattr(opts, name)
        if isinstance(value, (tuple, frozenset)):
            value = sorted(value) if isinstance(value, frozenset) else list(value)
        out[name] = value
    out.update({name: getattr(refs, name) for name in _REF_FIELDS})
    return out


def from_file_dict(data: Any, where: str) -> tuple[CheckOptions, HostRefs]:
    """An options file's object as CheckOptions and HostRefs, every key checked: GateError
    (step ``--options``) names ``where`` and the key that is unknown, missing, of the wrong
    type or out of range."""

    def error(name: str, message: str) -> GateError:
        return GateError("--options", f"{where}: {name}: {message}")

    if not isinstance(data, dict):
        raise GateError("--options", f"{where}: expected a JSON object, got {type(data).__name__}")
    if data.get("format") != FILE_FORMAT:
        raise error("format", f"expected {FILE_FORMAT!r}, got {shown(data.get('format'))}: not a gate options file")
    version = data.get("version")
    if version != FILE_VERSION or not _is_whole(version):
        raise error("version", f"this gate reads version {FILE_VERSION}, got {shown(version)}")
    unknown = [k for k in data if k not in FILE_KEYS]
    if unknown:
        raise error(shown(unknown[0]), f"unknown key; known: {', '.join(FILE_KEYS)}")
    if "url" not in data:
        raise error("url", "missing")
    kwargs: dict[str, Any] = {}
    for name, (kind, check, convert) in _FILE_FIELDS.items():
        if name not in data:
            continue
        value = data[name]
        nullable = name in _NULLABLE
        if value is None and nullable:
            kwargs[name] = None
            continue
        if not check(value):
            raise error(name, f"must be {kind}{' or null' if nullable else ''}, got {shown(value)}")
        if name != "expect_plan" and _too_large(value):
            raise error(name, f"{shown(value)} is too large: numbers of at most {MAX_FILE_NUMBER:.0e} in size")
        kwargs[name] = convert(value) if convert is not None else value
    refs = {}
    for name in _REF_FIELDS:
        value = data.get(name)
        if value is not None and not (isinstance(value, str) and value.strip()):
            raise error(name, f"must be a non-empty text or null, got {shown(value)}")
        refs[name] = value
    opts = CheckOptions(**kwargs)
    validate(opts, error)
    if opts.record and not opts.baseline:
        raise error("record", "needs a baseline")
    if refs["abort_file"] and not refs["watch_unit"]:
        raise error("abort_file", "needs watch_unit")
    return opts, HostRefs(**refs)

