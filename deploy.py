"""pyinfra entry point: `pyinfra inventory/a6000.py deploy.py`.

Calls the roles in order and nothing else; the decisions are the core's
(`sglang-deploy plan INVENTORY --explain` shows them offline).
"""

from pyinfra import host

from roles import sglang

ctx = sglang.prepare(host)
sglang.install(ctx)
sglang.configure(ctx)
sglang.restart(ctx)
