"""Stand-ins for SGLang's TP worker (scheduler) processes: one child process
per TP rank beyond 0, each a ``python -c`` loop whose command line names it
(``sglang::scheduler_TP<rank>``).  A child dies with its parent: Linux
PR_SET_PDEATHSIG (SIGKILL), and a parent-pid check every 0.2 s elsewhere."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

CHILD_CODE = r"""
import os, signal, sys, time
parent = int(sys.argv[1])
try:
    import ctypes
    ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
except Exception:
    pass
signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us
while os.getppid() == parent:
    time.sleep(0.2)
"""


def local_ranks(info: Dict[str, Any], nnodes: int, node_rank: int) -> List[int]:
    """The global TP ranks on this node: tp_size / nnodes of them."""
    per_node = max(int(info.get("tp_size") or 1) // max(nnodes, 1), 1)
    return list(range(node_rank * per_node, (node_rank + 1) * per_node))


class TPWorkers:
    def __init__(self, procs: List[subprocess.Popen], ranks: Optional[List[int]] = None):
        self.procs = procs
        self.ranks = ranks if ranks is not None else list(range(len(procs) + 1))

    @classmethod
    def spawn(cls, tp_size: int) -> "TPWorkers":
        return cls.spawn_ranks(list(range(max(int(tp_size), 1))))

    @classmethod
    def spawn_ranks(cls, ranks: List[int]) -> "TPWorkers":
        """This node's TP ranks: the process itself stands for the first, one child each for the rest
        (a node of a multi-node group holds tp_size / nnodes of them)."""
        procs = []
        for rank in ranks[1:]:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", CHILD_CODE, str(os.getpid()), f"sglang::scheduler_TP{rank}"],
                    stdin=subprocess.DEVNULL,
                    close_fds=True,
                )
            )
        return cls(procs, list(ranks))

    @property
    def pids(self) -> List[int]:
        return [p.pid for p in self.procs]

    def dead(self) -> Optional[str]:
        """A line naming the first worker that exited, else None."""
        for rank, p in zip(self.ranks[1:], self.procs):
            code = p.poll()
            if code is not None:
                return f"TP worker rank {rank} (pid {p.pid}) exited with code {code}"
        return None

    def stop(self, timeout: float = 5.0) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.terminate()
                except OSError:
                    pass
        deadline = time.monotonic() + timeout
        for p in self.procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
