"""pyinfra entry point: `pyinfra inventory/a6000.py deploy.py`.

The roles, in order, are in sglang_deploy/deploy/sglang.py; the decisions are the planner's
(`sglang-deploy plan INVENTORY --explain` shows them offline).
"""

from sglang_deploy.deploy.sglang import deploy_current_host

deploy_current_host()
