"""Run the pyinfra CLI with a count of what it sends to hosts (benchmark helper).

    python benchmarks/_counting_pyinfra.py COUNTS.json PYINFRA-ARGS...

Counts every shell command and every file upload through pyinfra's SSH
connector, per host, and writes them to COUNTS.json when pyinfra exits.
"""

import atexit
import json
import sys
from collections import Counter

from pyinfra.connectors.ssh import SSHConnector

COUNTS: Counter = Counter()
_run, _put = SSHConnector.run_shell_command, SSHConnector.put_file


def run_shell_command(self, *args, **kwargs):
    COUNTS[f"{self.host.name}:commands"] += 1
    return _run(self, *args, **kwargs)


def put_file(self, *args, **kwargs):
    COUNTS[f"{self.host.name}:uploads"] += 1
    return _put(self, *args, **kwargs)


SSHConnector.run_shell_command = run_shell_command
SSHConnector.put_file = put_file
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(json.dumps(dict(COUNTS))))

from pyinfra_cli.main import main  # noqa: E402

sys.argv[0] = "pyinfra"
main()
