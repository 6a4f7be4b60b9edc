"""SIMULATED Hugging Face Hub: the HTTP endpoints sglang-deploy uses (model info, file resolve),
serving recorded public checkpoints (``checkpoints/<org>--<name>/``, each with a
provenance.json naming where every file came from and which values are derived).

``python -m sglang_deploy.simulator.hub --port N [--token T]`` serves them until
interrupted; tests start ``server.HubServer`` in a thread on a free port.
"""
