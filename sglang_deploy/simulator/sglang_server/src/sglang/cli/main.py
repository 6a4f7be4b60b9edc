"""``sglang serve ARGS`` (the console script of 0.5.15+): SIMULATED."""

from __future__ import annotations

import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "serve":
        print("usage: sglang serve [server arguments]  (simulated SGLang: only 'serve')",
              file=sys.stderr)
        return 2
    from sglang._sim.server import main as serve

    return serve(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
