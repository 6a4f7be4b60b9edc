"""The post-deploy gate: is the server ready, configured as planned, and fast enough?

Pure (no I/O; listed in tests/test_layout.py):
    measure.py   what the gate measures: recorded streams -> TTFT, decode tok/s, ITL, aggregate
    load.py      concurrency levels, per-level percentiles, SLOs and goodput, the early-abandon bound
    prom.py      SGLang's Prometheus /metrics text -> spec accept length, generation throughput
    verdict.py   configuration as planned, the baseline per key, pass or fail with reasons
    predicted.py the plan's predicted bands, and the rule that judges a figure against one
    figures.py   prefill and the concurrency level judged like decode (baseline, prediction)
    causes.py    why a measurement may be slow: NVML summary, likely causes
    outcomes.py  what follows a verdict on a host (confirm, roll back, stop), unit status
    report.py    the report dict, the short reports of a gate cut short, the text table
    options.py   what one run is asked to do (CheckOptions, every default written once), its checks,
                 and the options file the deploy hands to the gate on a GPU host
    errors.py    how a gate ends before its verdict (GateError, ServiceDown)
    scrub.py     the API key and a URL's password masked in everything the gate prints
I/O:
    client.py    HTTP: readiness, what the server resolved (optional endpoints), streamed requests, /metrics
                 (a stale connection retried once, every request bounded in time and size)
    prefill.py   the long prompts (each distinct from its first token: SGLang's radix cache) and their
                 input tok/s
    watch.py     the server's systemd unit, watched through the measurement
    nvml.py      GPU samples on the host (pynvml, optional)
    files.py     prompts, the plan to expect, the baseline file, the options file
    run.py       run_check: the whole gate, step by step
    main.py      the gate's own entry point (``python -m sglang_deploy.gate``, the zipapp on a GPU
                 host): ``check --options FILE``, ``sample-gpus``; imports the gate and the core alone
"""
