"""The one table of inventory keys: name, type, default, one-line doc.

Everything else reads it: the spec's defaults (``spec.ServiceSettings``,
``GateSettings``, ``InstallSettings``, ``build_spec``), the unknown-key check
(``spec.KNOWN_KEYS``) and the inventory settings tables of ``docs/settings.md``, which
are generated from here::

    python -m sglang_deploy.plan.settings --update-docs docs/settings.md   # rewrite them in place
    python -m sglang_deploy.plan.settings --markdown                       # print them

(``--update-readme FILE`` is the older name of ``--update-docs FILE``.)

A default the code computes (from the model profile, from another key) is
``None`` here, and ``default_doc`` says where it comes from.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from sglang_deploy.gate.options import default as check_default
from sglang_deploy.gate.verdict import DEFAULT_FAIL_ON, DIFF_GROUPS
from sglang_deploy.waves import DEFAULT_WAVES


@dataclass(frozen=True)
class Setting:
    """One inventory key (or one key of a nested setting such as ``sglang_gate``)."""

    name: str
    type: str  # as a reader of the inventory writes it
    default: Any  # what the spec takes when the key is unset; None: none, or computed (see default_doc)
    doc: str  # one line: what the key means
    default_doc: str | None = None  # how the docs state a default that is not a plain value

    def default_text(self) -> str:
        return self.default_doc if self.default_doc is not None else _literal(self.default)


_EMPTY: Mapping[str, Any] = MappingProxyType({})

SETTINGS: tuple[Setting, ...] = (
    Setting("sglang_model", "string", None, "model path or Hugging Face id", "required"),
    Setting("sglang_model_dir", "path", None,
            "a copy of the checkpoint (or of just its metadata files) on the controller, read for the model's "
            "facts while `sglang_model` stays the id the server loads; absolute or `~/`", "none"),
    Setting("sglang_model_revision", "string", None,
            "Hub revision of the model (commit, tag or branch), resolved to a commit for the model's facts and "
            "the snapshot the host serves",
            "`main`"),
    Setting("sglang_version", "string", "0.5.23", "SGLang version to install and plan for"),
    Setting("sglang_model_source", "string", None,
            "where the weights come from: `hub` (downloaded on the host before the stop), `controller:/PATH` "
            "(a checkpoint directory on the controller, copied to the host before the stop), `host` "
            "(`sglang_model` is a directory already on the host: checked) or `server` (SGLang downloads at "
            "start, after the old server stopped)", "`host` for an absolute path, else `hub`"),
    Setting("sglang_model_store", "absolute path", "/var/lib/sglang/models",
            "the host's model store: a Hugging Face cache directory (`models--org--name/{blobs,refs,snapshots}`) "
            "owned by the service user"),
    Setting("sglang_model_disk_margin_mib", "integer >= 0", 1024,
            "free space the store keeps beyond the weights still to download; less stops the host before any "
            "change"),
    Setting("sglang_model_keep", "integer >= 2", 2,
            "snapshots kept per model in the store; older ones are pruned after a passing gate, never one the "
            "running or previous revision serves"),
    Setting("sglang_weights_verify", "boolean", False,
            "every deploy re-hashes the served snapshot (`hub` source) against the hashes recorded when it was "
            "staged, even when nothing else changes; a bad or missing file is fetched again before any stop"),
    Setting("sglang_trust_remote_code", "boolean", False,
            "run the model repository's own code (`--trust-remote-code`): needed when its `config.json` or "
            "`tokenizer_config.json` `auto_map` names classes SGLang and transformers do not ship; without it "
            "such a model is refused, naming the files"),
    Setting("sglang_objective", "string or mapping", "throughput",
            "what the host's parallel layout serves: `throughput` (replicas of a TP that holds the model's "
            "context, `--dp-size`, filling the GPUs: the smallest such TP unless a larger one is predicted to "
            "serve more than 5% more output tokens per GPU; DP attention for MLA models) or `latency` (the "
            "largest TP the heads allow, every GPU in one replica); or `{serve: throughput, input_tokens: 2000, "
            "output_tokens: 500, tpot_ms: 50, ttft_ms: 2000}` (the defaults shown): the requests the layouts are "
            "ranked for and the limits one stream must meet (each optional; `null` takes a limit away); declared "
            "`tp_size`/`dp_size` win"),
    Setting("sglang_model_profile", "string", None,
            "model profile key, when the model path names no known model", "matched from `sglang_model`"),
    Setting("sglang_gpus", "mapping", None,
            "declared hardware `{model, count, topology?, memory_gib?}`; topology one of `pcie`, "
            "`nvlink-pairs`, `nvlink-partial`, `nvlink-all`, `nvswitch`", "none (the deploy probes)"),
    Setting("sglang_gpu_indices", "list of integers", None, "GPUs the server uses, NVML order", "all"),
    Setting("sglang_intents", "mapping", None,
            "intent overrides: `{name: value}` or `{name: {value, reason}}`"),
    Setting("sglang_extra_args", "list of strings", (),
            "raw `launch_server` arguments, one list item per word, checked against the version's catalog"),
    Setting("sglang_env", "mapping", _EMPTY,
            "extra environment variables for the service; an entry named like a credential (`*TOKEN*`, "
            "`*KEY*`, `*SECRET*`, `*PASSWORD*`, ...) goes only to the root-only env file"),
    Setting("sglang_env_overrides", "list of strings", (),
            "variables of `sglang_env` that deliberately override what the plan or SGLang sets "
            "(`CUDA_VISIBLE_DEVICES`, `NCCL_NVLS_ENABLE`, `NCCL_CUMEM_ENABLE`, ...); each is applied with a "
            "warning, and any other such entry is refused"),
    Setting("sglang_secrets", "mapping", _EMPTY,
            "`{hf_token: {env: VAR} | {file: PATH}, api_key: ...}`, read on the controller", "none"),
    Setting("sglang_service_name", "string", "sglang", "systemd unit name"),
    Setting("sglang_user", "string", "sglang", "service user"),
    Setting("sglang_group", "string", None, "service group", "the user"),
    Setting("sglang_venvs_dir", "absolute path", "/opt/sglang",
            "directory holding one virtualenv per SGLang version (`sglang-<version>`), so a new install "
            "never touches the running or previous one"),
    Setting("sglang_cache_dir", "absolute path", "/var/lib/sglang/cache",
            "root of the compile caches (DeepGEMM, Triton, torch inductor, CUDA, FlashInfer, TileLang, SGLang's "
            "own): one directory per SGLang version (`sglang-<version>`) named in the service environment, owned "
            "by the service user, kept across restarts and rollbacks, removed when the version's venv is gone"),
    Setting("sglang_installer", "pip or uv", "pip",
            "what installs SGLang into its virtualenv: `pip`, or `uv` (itself installed first into "
            "`<sglang_venvs_dir>/.uv` with pip and the same index options); the `sglang_pip_*` options apply to both"),
    Setting("sglang_pip_extras", "list of strings", (),
            "extras of the `sglang` package (e.g. `[all]`), kept on every install"),
    Setting("sglang_pip_index_url", "string", None, "pip `--index-url` for the install", "pip's default"),
    Setting("sglang_pip_extra_index_urls", "list of strings", (), "pip `--extra-index-url` values"),
    Setting("sglang_pip_find_links", "string", None,
            "pip `--find-links`: a local wheel directory or URL (air-gapped fleets)"),
    Setting("sglang_pip_no_index", "boolean", False,
            "pip `--no-index`: install only from `sglang_pip_find_links`"),
    Setting("sglang_transfer_engine_version", "version", None,
            "a prefill or decode server (`sglang_role`): the version of its KV transfer engine installed into the "
            "SGLang virtualenv (`mooncake-transfer-engine`, or `nixl`, by `disaggregation_transfer_backend`)",
            "`sglang_deploy/plan/transfer.py`'s"),
    Setting("sglang_workdir", "absolute path", "/var/lib/sglang", "working directory"),
    Setting("sglang_config_dir", "absolute path", "/etc/sglang", "directory of the env file"),
    Setting("sglang_timeout_start_s", "integer > 0", None, "`TimeoutStartSec`, and the gate's ready timeout "
            "unless `sglang_gate.ready_timeout_s` is set", "from the model profile"),
    Setting("sglang_timeout_stop_s", "integer > 0", 120, "`TimeoutStopSec`"),
    Setting("sglang_restart_sec", "integer > 0", 15, "`RestartSec` between automatic restarts"),
    Setting("sglang_limit_nofile", "integer > 0", 65536, "`LimitNOFILE`"),
    Setting("sglang_target_tok_s", "number > 0", None, "the deploy gate's single-stream decode target, tok/s",
            "none (readiness, configuration and baseline only)"),
    Setting("sglang_tp_group", "string", None,
            "name of the multi-node tensor-parallel group this host is a member of (one instance over every "
            "host with the name; rank = inventory order)"),
    Setting("sglang_nnodes", "integer >= 2", None,
            "member count of the tp group, checked against the inventory", "the member count"),
    Setting("sglang_dist_init_port", "port", 50000,
            "the tp group's rendezvous port on rank 0 (`--dist-init-addr HOST:PORT`)"),
    Setting("sglang_node_address", "host name or IP", None,
            "address the other members of the tp group reach this host on (rank 0's is the rendezvous address)",
            "`ssh_hostname`, else the host name"),
    Setting("sglang_nccl_socket_ifname", "interface names", None,
            "`NCCL_SOCKET_IFNAME` in `/etc/nccl.conf`: interface(s) NCCL uses between nodes "
            "(`eth0`, `ib0,ib1`, `^docker`)", "NCCL's choice"),
    Setting("sglang_gloo_socket_ifname", "interface names", None,
            "`GLOO_SOCKET_IFNAME` in the service environment: interface(s) torch's Gloo uses between nodes",
            "Gloo's choice"),
    Setting("sglang_gate", "mapping", None, "deploy gate settings, the keys below", "each key's default"),
    Setting("sglang_watch", "mapping, true or false", None,
            "the continuous check on the host (docs/watch.md): a systemd timer runs a light check (a short "
            "measurement, the config comparison, drift, GPU health) and writes node_exporter textfile metrics; "
            "`true` for the defaults, or the keys below; never restarts anything", "off"),
    Setting("sglang_rollout", "mapping", None,
            "fleet rollout settings for `sglang-deploy rollout`, the keys below (its flags win; every host "
            "must agree)", "each key's default"),
    Setting("sglang_gateway", "mapping or true", None,
            "this host runs the SGLang Model Gateway (`sglang-router`, its own pinned virtualenv and unit) in "
            "front of the hosts that name it in `sglang_gateways`: `true` for the defaults, or the keys below",
            "off"),
    Setting("sglang_gateways", "list of host names", (),
            "inventory names of the gateway hosts (each with `sglang_gateway`) this host's server is a worker "
            "of: a restart leaves them, drains, and joins them again once its gate passes", "none"),
    Setting("sglang_role", "`prefill` or `decode`", None,
            "this host's server is a prefill or a decode server of a disaggregated fleet behind the gateways of "
            "`sglang_gateways` (`--disaggregation-mode`); the transfer settings are the `disaggregation_*` intents",
            "none (prefill and decode in one server)"),
    Setting("sglang_worker_url", "http(s) URL", None, "URL the gateways reach this host's server at",
            "`http://<sglang_node_address or ssh_hostname or host name>:<port>` (the `port` intent)"),
    Setting("sglang_drain", "`skip` or mapping", None,
            "how a worker of `sglang_gateways` restarts: the keys below, or `skip` (the gateways are not "
            "touched: their own health checks take the server out and back, and an unreachable gateway does "
            "not stop the deploy)", "each key's default"),
)

#: The requests a throughput layout is ranked for when ``sglang_objective`` names none: a 2,000-token
#: prompt and 500 output tokens, each stream at least 20 tok/s (TPOT 50 ms) with its first token
#: within 2 s (the workload and limits of aiconfigurator's published rankings: an interactive
#: service's, not a batch job's; ``null`` takes a limit away), and each key's bounds.
WORKLOAD_DEFAULTS: Mapping[str, Any] = MappingProxyType({"input_tokens": 2000, "output_tokens": 500,
                                                         "tpot_ms": 50.0, "ttft_ms": 2000.0})
WORKLOAD_KEYS: Mapping[str, tuple[float, float]] = MappingProxyType({
    "input_tokens": (1, 1 << 24), "output_tokens": (1, 1 << 24), "tpot_ms": (0.1, 600_000.0),
    "ttft_ms": (0.1, 3_600_000.0)})
#: The deploy gate's prefill prompt, tokens (``sglang_gate.prefill_tokens``), and its bound: a
#: prompt's TTFT grows with its length (attention's share quadratically), and the server's context
#: must hold it; a few thousand tokens measure the prefill path in about a second on a GPU.
GATE_PREFILL_TOKENS = 2048
GATE_PREFILL_TOKENS_MAX = 32768
#: The deploy gate's concurrency level by ``sglang_objective`` (``sglang_gate.concurrency``'s default).
#: A throughput layout (replicas of the smallest TP) serves batches: 8 streams, the smallest level
#: above 1 the plan predicts (plan/predicted.py LEVELS), check its batched path at the cost of three
#: rounds of one request's length. A latency layout (every GPU in one replica) serves single streams,
#: which the single-stream run already judges: 1, no level added.
GATE_CONCURRENCY_BY_OBJECTIVE: Mapping[str, int] = MappingProxyType({"throughput": 8, "latency": 1})
GATE_CONCURRENCY_MAX = 64
#: Seconds the concurrency level and the prefill may add to the deploy's gate, and so to the serving
#: gap of a restart (gate/options.py CheckOptions.added_budget_s): a further round or prefill request
#: only while it still ends within them (benchmarks/gate_additions.py measures what they add).
GATE_ADDED_BUDGET_S = 20.0

#: Keys of ``sglang_gate``, in the order error messages list them. The measurement's defaults are
#: the gate's own (``CheckOptions``, read through ``gate.options.default``), so that ``check`` and a
#: deploy's gate measure alike unless the inventory says otherwise.
GATE_SETTINGS: tuple[Setting, ...] = (
    # The deploy's own wait, deliberately longer than check's --ready-timeout default: a deploy has
    # just restarted the server, which loads the weights (and may compile kernels) before it is ready,
    # whereas check is usually pointed at a server that is already up.
    Setting("ready_timeout_s", "number > 0", None, "seconds to wait for the restarted server to be ready",
            "the start budget: `sglang_timeout_start_s` when set, else the host's recorded starts, else the plan's "
            "phases (`plan --explain`, \"Start\"; docs/gate.md)"),
    Setting("repeats", "integer > 0", check_default("repeats"), "measured requests"),
    Setting("max_tokens", "integer >= 2", check_default("max_tokens"), "tokens per measured request"),
    Setting("tolerance", "fraction in [0, 1)", check_default("tolerance"),
            "fraction below the best recent passing result that still passes"),
    Setting("fail_on", "list of groups", None,
            "config difference groups that fail the gate: any of " + ", ".join(f"`{g}`" for g in DIFF_GROUPS)
            + ", or `all` / `none`", ", ".join(f"`{g}`" for g in DIFF_GROUPS if g in DEFAULT_FAIL_ON)),
    Setting("url", "http(s) URL", None, "URL the controller measures",
            "`http://<ssh_hostname or host name>:<port>` (the `port` intent)"),
    Setting("run_on", "auto, controller or host", "auto",
            "where the gate runs: `controller` (over the network), `host` (on the GPU host, against the port "
            "there) or `auto` (on the host when the server binds only loopback)"),
    Setting("accept_slower", "string, at most 500 printable characters", check_default("accept_slower"),
            "the operator's reason to let a result slower than its baseline pass (a known-slower SGLang "
            "upgrade): the baseline rule passes with `accepted: <reason>`, recorded in the history; never a "
            "missed target or a configuration difference; remove it once the deploy landed", "none"),
    Setting("prediction_floor", "fraction in [0, 1)", check_default("prediction_floor"),
            "with neither a target nor a baseline result (a first deploy, a new host): the gate fails below this "
            "fraction of the plan's predicted decode band's low end (`plan --json` `predicted`); 0: off"),
    Setting("prefill_tokens", f"integer 0..{GATE_PREFILL_TOKENS_MAX}", GATE_PREFILL_TOKENS,
            "after the decode run, a warm-up and 3 requests of a distinct long English prompt of about this many "
            "tokens, one output token each, measure prefill (input tok/s = the server's prompt tokens / TTFT), "
            "judged like decode against the baseline's and the plan's predicted `prefill_tok_s`; 0: off"),
    Setting("concurrency", f"integer 1..{GATE_CONCURRENCY_MAX}", None,
            "one concurrency level the gate also measures (as `check --concurrency N`: up to 3 rounds of N "
            "streams), its aggregate output tok/s judged like decode against the baseline's at the same level "
            "and the plan's predicted `output_tok_s`; 1: none; a tuning trial's own levels win; with prefill, "
            "bounded to about 20 s added to the gate (docs/gate.md)",
            "`8` with `sglang_objective: throughput`, `1` (none) with `latency`"),
)

#: Keys of ``sglang_rollout`` (read by the rollout, ``sglang_deploy.commands.rollout``, and by the deploy's
#: restart steps behind gateways, ``sglang_deploy.deploy.gateway``).
ROLLOUT_SETTINGS: tuple[Setting, ...] = (
    Setting("waves", "counts and percentages", ",".join(DEFAULT_WAVES),
            "wave sizes, Ansible serial style: counts and percentages (`1,25%` or a list), the last repeated; "
            "a `canary` group is the first wave"),
    Setting("max_fail", "integer >= 0", 0, "failed hosts a wave may have before the rollout halts"),
    Setting("max_unavailable", "count or percentage", 1,
            "workers of one gateway a wave restarts at once: a count (`2`) or a percentage of the gateway's "
            "workers (`25%`, rounded down, at least 1); a multi-node tp group counts as one worker"),
)
ROLLOUT_KEYS = tuple(s.name for s in ROLLOUT_SETTINGS)
ROLLOUT_DEFAULTS = {s.name: s.default for s in ROLLOUT_SETTINGS}

#: Keys of ``sglang_gateway`` (parsed and bounded by ``sglang_deploy.plan.gateway``). The router's
#: defaults are sglang-router 0.3.2's (sglang_router/router_args.py, RouterArgs).
GATEWAY_SETTINGS: tuple[Setting, ...] = (
    Setting("version", "string", "0.3.2",
            "`sglang-router` release, installed in `<venvs_dir>/sglang-router-<version>`"),
    Setting("port", "port", 30000, "the gateway's port (router `--port`)"),
    Setting("metrics_port", "port", 29000, "Prometheus metrics port (router `--prometheus-port`)"),
    Setting("host", "IP address or host name", "0.0.0.0",
            "address the gateway and its metrics bind (router `--host`, `--prometheus-host`)"),
    Setting("policy", "policy name", "cache_aware",
            "load balancing (router `--policy`): `random`, `round_robin`, `cache_aware`, `power_of_two` or `manual`"),
    Setting("prefill_policy", "policy name", None,
            "a gateway of prefill and decode servers (its workers set `sglang_role`): how it balances the prefill "
            "servers (router `--prefill-policy`; also `bucket`)", "`policy`"),
    Setting("decode_policy", "policy name", None,
            "the same for the decode servers (router `--decode-policy`)", "`policy`"),
    Setting("request_timeout", "time span, 1s..24h", 1800, "bound of one request (router `--request-timeout-secs`)",
            "`30m`"),
    Setting("retries", "integer 0..20", 5, "retries of a failed request on another worker (router "
            "`--retry-max-retries`)"),
    Setting("health_interval", "time span, 1s..1h", 60,
            "how often the gateway checks each worker's health (router `--health-check-interval-secs`)", "`1m`"),
    Setting("api_key", "secret reference", None,
            "`{env: VAR}` or `{file: PATH}` on the controller: the key the gateway's admin API requires and "
            "sends to its workers (router `--api-key`, passed in-process: never in its argv or unit)", "none"),
    Setting("service_name", "string", "sglang-gateway", "systemd unit name"),
    Setting("venvs_dir", "absolute path", "/opt/sglang-gateway",
            "directory holding one virtualenv per `sglang-router` version"),
    Setting("routers", "integer 1..16", 1,
            "router processes on the host. 1: the router itself listens on `port`, and its restart refuses "
            "connections for about a second. 2 or more: HAProxy (Debian's `haproxy`) listens on `port` in front "
            "of that many routers on `router_port`, `router_port`+1, ... (router i's metrics on "
            "`metrics_port`+1+i, HAProxy's own on `metrics_port`); a new "
            "revision restarts them one at a time, each drained in the balancer first, and a change of the "
            "balancer's own configuration is a seamless reload (docs/gateway.md)"),
    Setting("router_port", "port", None, "first router's port when `routers` > 1 (router i: `router_port` + i)",
            "`port` + 1"),
    Setting("balancer_check_interval", "time span, 1s..1m", 1,
            "with `routers` > 1: how often HAProxy checks each router's `/health`; two failed checks in a row "
            "take a router out, one good check puts it back", "`1s`"),
)

#: Keys of ``sglang_drain`` on a worker of a gateway (parsed by ``sglang_deploy.plan.gateway``).
DRAIN_SETTINGS: tuple[Setting, ...] = (
    Setting("timeout", "time span, 0s..24h", 300,
            "after the host left its gateways, how long in-flight requests may run before the stop goes ahead",
            "`5m`"),
    Setting("admit_timeout", "time span, 1s..1h", 120,
            "after its gate passed, how long the gateways may take to list the host's server as a healthy "
            "worker again", "`2m`"),
)

#: Keys of ``sglang_watch`` (parsed and bounded by ``sglang_deploy.plan.watch``).
WATCH_SETTINGS: tuple[Setting, ...] = (
    Setting("interval", "time span, 10s..24h", 900, "how often the check runs (systemd time span: `15m`, `1h`)",
            "`15m`"),
    Setting("max_tokens", "integer 2..256", 32, "tokens per measured request (three requests and a warm-up)"),
    Setting("timeout", "time span, 10s..1h", 120, "bound of one run (`TimeoutStartSec`); the measurement's own "
            "deadlines stay inside it", "`2m`"),
    Setting("textfile_dir", "absolute path", "/var/lib/prometheus/node-exporter",
            "node_exporter's textfile-collector directory (Debian's default)"),
    Setting("verify_weights_bytes", "integer >= 0", 0,
            "bytes of the served snapshot re-hashed per run, resuming where the last run stopped (0: off)"),
    Setting("prefill_tokens", f"integer 0..{GATE_PREFILL_TOKENS_MAX}", 0,
            "each run also measures prefill as the deploy gate does (a warm-up and 3 requests of a long prompt "
            "of about this many tokens, one output token each), judged against the history's prefill at the same "
            "length; the deploy gate's length (`sglang_gate.prefill_tokens`, 2048) compares with its results; "
            "0: off (a prefill server's check measures its prefill whatever this says)"),
)

DEFAULTS: Mapping[str, Any] = MappingProxyType({s.name: s.default for s in SETTINGS})
WATCH_DEFAULTS: Mapping[str, Any] = MappingProxyType({s.name: s.default for s in WATCH_SETTINGS})
GATE_DEFAULTS: Mapping[str, Any] = MappingProxyType({s.name: s.default for s in GATE_SETTINGS})
GATEWAY_DEFAULTS: Mapping[str, Any] = MappingProxyType({s.name: s.default for s in GATEWAY_SETTINGS})
DRAIN_DEFAULTS: Mapping[str, Any] = MappingProxyType({s.name: s.default for s in DRAIN_SETTINGS})

#: Where the generated tables live, between the two marker comments below.
DOCS_FILE = "docs/settings.md"
TABLE_START = ("<!-- settings table: generated by "
               "`python -m sglang_deploy.plan.settings --update-docs docs/settings.md` "
               "from sglang_deploy/plan/settings.py; edit it there -->")
TABLE_END = "<!-- end settings table -->"


def _literal(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    if isinstance(value, Mapping):
        return "`{}`" if not value else f"`{dict(value)}`"
    if isinstance(value, tuple):
        return "`[" + ", ".join(map(str, value)) + "]`"
    return f"`{value}`"


def _rows(settings: Sequence[Setting], first: str) -> list[str]:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    out = [f"| {first} | type | meaning | default |", "|---|---|---|---|"]
    out += [f"| `{s.name}` | {cell(s.type)} | {cell(s.doc)} | {cell(s.default_text())} |" for s in settings]
    return out


def markdown_table() -> str:
    """The inventory settings tables of ``docs/settings.md``, between their marker comments (no trailing newline)."""
    lines = [TABLE_START, "", *_rows(SETTINGS, "name"), "",
             "Keys of `sglang_gate` (the post-restart check):", "", *_rows(GATE_SETTINGS, "key"), "",
             "Keys of `sglang_rollout`:", "", *_rows(ROLLOUT_SETTINGS, "key"), "",
             "Keys of `sglang_watch` (the continuous check, [watch.md](watch.md)):", "",
             *_rows(WATCH_SETTINGS, "key"), "",
             "Keys of `sglang_gateway` (a host that runs the SGLang Model Gateway):", "",
             *_rows(GATEWAY_SETTINGS, "key"), "",
             "Keys of `sglang_drain` (a worker of `sglang_gateways`):", "", *_rows(DRAIN_SETTINGS, "key"), "",
             TABLE_END]
    return "\n".join(lines)


def replace_table(text: str) -> str:
    """``text`` (a Markdown file's) with the part between the markers (markers included) regenerated."""
    start = text.find("<!-- settings table:")
    end = text.find(TABLE_END)
    if start < 0 or end < start:
        raise ValueError(f"no settings table markers ({TABLE_START[:20]}... {TABLE_END}) in the file")
    return text[:start] + markdown_table() + text[end + len(TABLE_END):]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sglang_deploy.plan.settings", description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--markdown", action="store_true", help=f"print the inventory settings tables ({DOCS_FILE})")
    action.add_argument("--update-docs", "--update-readme", dest="update_docs", metavar="FILE",
                        help=f"regenerate the tables between their markers in this file in place ({DOCS_FILE})")
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown_table())
        return 0
    with open(args.update_docs, encoding="utf-8") as f:
        text = f.read()
    new = replace_table(text)
    if new != text:
        with open(args.update_docs, "w", encoding="utf-8") as f:
            f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
