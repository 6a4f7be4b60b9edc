"""Rules about a GPU host, judged once: standard library only, imported by ``status`` on the
controller (``sglang_deploy/status/``) and by the continuous check on the host
(``sglang_deploy/deploy/host/watch.py``, which gets this package as ``hostrules.zip`` beside it),
and the source of the shipped alert rules' thresholds
(``monitoring/prometheus/sglang-deploy-alerts.yml``; ``tests/test_alert_rules.py`` fails when the
two differ). Nothing here reads a file or runs a command: facts in, findings out.
"""
