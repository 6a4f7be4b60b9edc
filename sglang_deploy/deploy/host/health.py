"""Exit 0 when the server at URL (argv[1]) is ready as the deploy's gate means it:
/health_generate answers 200 (/health where the server has no such path).

Standard library only: run with the service's Python on the host, as-is.
"""
import sys
import urllib.error
import urllib.request

for path in ("/health_generate", "/health"):
    try:
        urllib.request.urlopen(sys.argv[1] + path, timeout=10)
        sys.exit(0)
    except urllib.error.HTTPError as exc:
        if exc.code not in (404, 405):
            sys.exit(1)
    except Exception:
        sys.exit(1)
sys.exit(1)
