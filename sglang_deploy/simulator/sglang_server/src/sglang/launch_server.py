"""``python -m sglang.launch_server ARGS``: SIMULATED SGLang server."""

import sys

if __name__ == "__main__":
    from sglang._sim.server import main

    sys.exit(main(sys.argv[1:]))
