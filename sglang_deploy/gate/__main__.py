"""``python -m sglang_deploy.gate``: the gate's own entry point (sglang_deploy/gate/main.py)."""

import sys

from sglang_deploy.gate.main import main

sys.exit(main())
