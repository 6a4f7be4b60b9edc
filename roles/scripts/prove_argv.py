"""Run on the host with the SGLang venv's python: parse a planned argv with the
installed SGLang's own parser (ServerArgs.add_cli_args, then parse_args).

    python prove_argv.py ARGV.json

Exit 0 when accepted; exit 1 with one line naming the installed version and
argparse's own complaint when refused. Nothing else is touched.
"""

import argparse
import io
import json
import sys
from contextlib import redirect_stderr


def main() -> int:
    argv = json.load(open(sys.argv[1]))
    try:
        import sglang
        from sglang.srt.server_args import ServerArgs
    except Exception as exc:  # the venv has no usable SGLang
        print(f"cannot import the installed SGLang: {exc}", file=sys.stderr)
        return 1
    version = getattr(sglang, "__version__", "unknown")
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    err = io.StringIO()
    try:
        with redirect_stderr(err):
            parser.parse_args(argv)
    except SystemExit as exc:
        if exc.code:
            complaint = [line for line in err.getvalue().splitlines() if "error:" in line]
            reason = complaint[-1].split("error:", 1)[1].strip() if complaint else err.getvalue().strip()
            print(f"SGLang {version} installed on this host refuses the planned launch flags: {reason}",
                  file=sys.stderr)
            return 1
    print(f"SGLang {version} accepts the planned launch flags")
    return 0


if __name__ == "__main__":
    sys.exit(main())
