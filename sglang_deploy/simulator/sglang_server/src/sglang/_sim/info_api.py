"""The endpoints that describe the server: ``/health*``, ``/get_server_info``
(``/server_info``), ``/model_info``, ``/v1/models`` and ``/metrics``."""

from __future__ import annotations

from sglang._sim import resolve
from sglang._sim.http_types import Handler


def health(h: Handler) -> None:
    h.send_empty(h.app.faults.health_status(h.app.ready))


def server_info(h: Handler) -> None:
    h.send_json(200, h.app.server_info())


def model_info(h: Handler) -> None:
    h.send_json(200, resolve.model_info(h.app.info, h.app.cfg))


def models(h: Handler) -> None:
    app = h.app
    name = app.faults.model_name(app.served_name)
    h.send_json(
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


def metrics(h: Handler) -> None:
    # Gauge names as SGLang's SchedulerMetricsCollector (python/sglang/srt/metrics/collector.py)
    # registers them; spec_accept_length is 0.0 there until a speculative step ran (its
    # SchedulerStats default), so it is here.
    s = h.app.engine.stats
    name = h.app.served_name
    accept = s.avg_spec_accept_length() or 0.0
    # sglang:num_running_reqs and sglang:num_queue_reqs: SGLang 0.5.23 registers them in
    # python/sglang/srt/observability/metrics_collector.py (SchedulerMetricsCollector), labelled
    # with its scheduler labels (SchedulerMetricsCollector's creator there: model_name,
    # engine_type "unified" without disaggregation, tp_rank, pp_rank, moe_ep_rank). Here every
    # generation request in flight counts as running; the stand-in has no waiting queue of its
    # own (its performance model folds queueing into the TTFT), so the queue gauge is 0.
    with s.lock:
        running = s.running
    sched = f'model_name="{name}",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0"'
    lines = [
        "# TYPE sglang:num_running_reqs gauge",
        f"sglang:num_running_reqs{{{sched}}} {running}",
        "# TYPE sglang:num_queue_reqs gauge",
        f"sglang:num_queue_reqs{{{sched}}} 0",
        "# TYPE sglang:prompt_tokens_total counter",
        f'sglang:prompt_tokens_total{{model_name="{name}"}} {s.prompt_tokens}',
        "# TYPE sglang:generation_tokens_total counter",
        f'sglang:generation_tokens_total{{model_name="{name}"}} {s.generation_tokens}',
        "# TYPE sglang:num_requests_total counter",
        f'sglang:num_requests_total{{model_name="{name}"}} {s.requests}',
        "# TYPE sglang:gen_throughput gauge",
        f'sglang:gen_throughput{{model_name="{name}"}} {s.last_gen_throughput}',
        "# TYPE sglang:spec_accept_length gauge",
        f'sglang:spec_accept_length{{model_name="{name}"}} {accept}',
    ]
    body = ("\n".join(lines) + "\n").encode()
    h.send_response(200)
    h.send_header("Content-Type", "text/plain; version=0.0.4")
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)
