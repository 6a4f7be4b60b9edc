"""pyinfra entry point: `pyinfra inventory/a6000.py deploy.py`.

It will only call the roles in order (probe, install, NCCL, prove, service,
gate). The roles are not built yet, so this refuses to run rather than
pretend to deploy: plan offline with `sglang-deploy plan INVENTORY`.
"""

raise SystemExit(
    "deploy.py: the deploy roles (probe, install, NCCL, service) are not built yet; "
    "nothing was changed. Plan offline with: sglang-deploy plan INVENTORY --explain"
)
