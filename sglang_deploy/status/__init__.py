"""`sglang-deploy status`: what every host runs against what it should run, pure. The modules:
``model`` (what a host sent, checked), ``gpus``, ``watch`` (the continuous check's last line),
``redact``, ``row`` (one row per host, the exit code), ``gateways``; this package's names are theirs.

The status fact (``sglang_deploy/deploy/status.py``) reads a host in one command and prints
``key=value`` lines; :func:`parse_observed` turns them into :class:`Observed`. Everything a
host sent is untrusted data: markers, revision names, versions and the gate's history are
checked for shape and type, bounded, and made printable before any of it is shown, and the
``--diff`` of a drifted file never shows a secret (:func:`redact`).

:func:`build_row` compares one host's :class:`Observed` with what the inventory plans today
(:class:`Planned`) and gives one :class:`Row`: a state word, the problems, and every figure.
:func:`exit_code` gives the command's exit code; its table and JSON are the command's
(``sglang_deploy/commands/status_table.py``).

A host that runs the SGLang Model Gateway (``sglang_gateway``) is not an SGLang host: its row
(``kind`` ``gateway``, :func:`gateway_row`) comes from the gateway's own worker list
(``GET /workers``, read by the controller, :class:`GatewayRead`) against the workers the
inventory gives it (:func:`fleet_gateways`); a serving host's row gains its membership in each
of its gateways (:func:`add_gateways`).

States, most severe first (a row shows the first that holds; ``problems`` lists them all):

- ``unreachable``: SSH could not connect, or the read failed; a gateway did not answer its worker
  list (exit 2);
- ``error``: the host cannot be planned (its inventory data) or is not a systemd host (exit 2);
- ``never-deployed``: no revision was ever made live here;
- ``half-deployed``: a revision is live but not marked deployed (a deploy is running, died, or
  its gate could not measure: the deploy has no lock, so these look alike), a revision's files
  are being staged, or a swap left a temporary file;
- ``drifted``: a live file (unit, env file, nccl.conf) differs from the deployed revision's copy, or
  the running server's argv differs from the deployed revision's ExecStart=;
- ``down``: the unit is not active;
- ``degraded``: a GPU is unhealthy (uncorrected ECC errors, a retirement or row remap pending, a
  row remap failed, XID events since boot, hardware/thermal/power-brake slowdown, memory held by
  processes other than the server), the continuous check's last run of this revision failed, or
  one of its gateways does not list it healthy (and no deploy is draining it now); a gateway: a
  worker the inventory gives it is not listed, or listed unhealthy;
- ``gate-failed``: the host's last gate did not pass;
- ``version``: the SGLang installed in the running revision's venv is not the one it was deployed with;
- ``pending``: nothing is wrong, but the inventory now plans another revision (a deploy would change it);
- ``ok``.

Exit codes: 0 every host ``ok``; 1 any host in another state; 2 any host ``unreachable`` or
``error`` (and bad input, decided by the command before anything is read).
"""

from __future__ import annotations

# The names of the modules below, as one surface: `from sglang_deploy import status`.
from sglang_deploy.status.model import (CMDLINE_BYTES, DEGRADED, DIFF_BYTES, DOWN, DRIFTED, ERROR, FILE_KEYS,
                                        GATEWAY_READ_TIMEOUT_S, GATE_FAILED, HALF, HISTORY_BYTES, HISTORY_LINES,
                                        HISTORY_LINE_BYTES, HISTORY_SCAN_BYTES, KIND_GATEWAY, KIND_SERVER, LISTED,
                                        LastGate, MEMBERSHIPS, MISSING, NEVER, OK, OTHERS_SHOWN, Observed, PENDING,
                                        READ_PARALLEL, READ_PARALLEL_MAX, SCHEMA, STAGED_UNIT_BYTES, STATES,
                                        UNHEALTHY, UNKNOWN, UNREACHABLE, UnitShow, VERSION, WATCH_LINES,
                                        WEIGHTS_ANSWER_BYTES, WEIGHTS_BAD_SHOWN, WeightsCheck, gate_entries,
                                        last_gate, parse_observed, parse_weights_check)
from sglang_deploy.status.gpus import (GPU_HEALTH_BYTES, Gpu, GpuHealth, gpu_findings, gpu_summary,
                                       parse_gpu_health)
from sglang_deploy.status.redact import (argv_changes, redact, unified_diff)
from sglang_deploy.status.watch import (LastWatch, judge_watch, last_watch)
from sglang_deploy.status.row import (Planned, Row, build_row, error_row, exit_code, lock_held, unreachable_row)
from sglang_deploy.status.gateways import (FleetGateways, GatewayHostSeen, GatewayRead, ListedWorker, add_gateways,
                                           fleet_gateways, gateway_error_row, gateway_host_seen, gateway_row,
                                           membership, with_replicas)

__all__ = [
    "CMDLINE_BYTES",
    "DEGRADED",
    "DIFF_BYTES",
    "DOWN",
    "DRIFTED",
    "ERROR",
    "FILE_KEYS",
    "GATEWAY_READ_TIMEOUT_S",
    "GATE_FAILED",
    "HALF",
    "HISTORY_BYTES",
    "HISTORY_LINES",
    "HISTORY_LINE_BYTES",
    "HISTORY_SCAN_BYTES",
    "KIND_GATEWAY",
    "KIND_SERVER",
    "LISTED",
    "LastGate",
    "MEMBERSHIPS",
    "MISSING",
    "NEVER",
    "OK",
    "OTHERS_SHOWN",
    "Observed",
    "PENDING",
    "READ_PARALLEL",
    "READ_PARALLEL_MAX",
    "SCHEMA",
    "STAGED_UNIT_BYTES",
    "STATES",
    "UNHEALTHY",
    "UNKNOWN",
    "UNREACHABLE",
    "UnitShow",
    "VERSION",
    "WATCH_LINES",
    "WEIGHTS_ANSWER_BYTES",
    "WEIGHTS_BAD_SHOWN",
    "WeightsCheck",
    "gate_entries",
    "last_gate",
    "parse_observed",
    "parse_weights_check",
    "GPU_HEALTH_BYTES",
    "Gpu",
    "GpuHealth",
    "gpu_findings",
    "gpu_summary",
    "parse_gpu_health",
    "argv_changes",
    "redact",
    "unified_diff",
    "LastWatch",
    "judge_watch",
    "last_watch",
    "Planned",
    "Row",
    "build_row",
    "error_row",
    "exit_code",
    "lock_held",
    "unreachable_row",
    "FleetGateways",
    "GatewayHostSeen",
    "GatewayRead",
    "ListedWorker",
    "add_gateways",
    "fleet_gateways",
    "gateway_error_row",
    "gateway_host_seen",
    "gateway_row",
    "membership",
    "with_replicas",
]
