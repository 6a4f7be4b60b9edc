"""Serve the recorded checkpoints on 127.0.0.1 until SIGINT/SIGTERM (for the demo and e2e tests)."""

from __future__ import annotations

import argparse
import signal
import sys

from sglang_deploy.simulator.hub.repos import recorded_repos
from sglang_deploy.simulator.hub.server import HubServer
from sglang_deploy.simulator.hub.weights import weight_files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sglang_deploy.simulator.hub", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="0: a free port (printed)")
    parser.add_argument("--token-file", help="a file holding the one token granted access to gated repos")
    parser.add_argument("--weights", action="append", default=[], metavar="REPO=BYTES",
                        help="add generated weight shards of this total size to a recorded repo (hub/weights.py)")
    parser.add_argument("--rate", type=float, help="throttle file bodies to this many bytes/s")
    args = parser.parse_args(argv)
    tokens = ()
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as handle:
            tokens = (handle.read().strip(),)
    extra = {}
    for item in args.weights:
        repo, _, size = item.partition("=")
        extra[repo] = weight_files(repo, int(size))
    server = HubServer(recorded_repos(extra), port=args.port, tokens=tokens, rate_bytes_s=args.rate)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
    print(server.url, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
