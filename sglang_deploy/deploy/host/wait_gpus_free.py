"""Run on the host after `systemctl stop`: wait until the old service is really gone.

    python3 wait_gpus_free.py --pids-file FILE --gpus 0,1 --timeout 120

Done when none of the old service's processes (PIDs listed in FILE, read from
its cgroup before the stop) is alive, and, where NVML is available (pynvml),
none of them holds one of the service's GPUs. TP workers outliving a stop and
holding GPU memory are a known SGLang failure; starting over them would OOM.
Exit 0 when free; exit 1 with one clear line after the timeout.
"""

import argparse
import sys
import time


def alive(pid: int) -> bool:
    """A process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("State:"):
                    return "Z" not in line.split()[1]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return True


def gpu_holders(gpus):
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:
        return None  # no NVML here: process liveness is all we can check
    held = {}
    try:
        for index in gpus:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                held.setdefault(proc.pid, []).append(index)
    finally:
        pynvml.nvmlShutdown()
    return held


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pids-file", required=True)
    parser.add_argument("--gpus", default="")
    parser.add_argument("--timeout", type=float, default=120)
    args = parser.parse_args()
    try:
        old = {int(p) for p in open(args.pids_file).read().split()}
    except FileNotFoundError:
        old = set()
    gpus = [int(g) for g in args.gpus.split(",") if g]
    deadline = time.monotonic() + args.timeout
    while True:
        living = sorted(p for p in old if alive(p))
        holders = gpu_holders(gpus) or {}
        holding = sorted(p for p in holders if p in old)
        if not living and not holding:
            return 0
        if time.monotonic() > deadline:
            what = f"processes {living} still alive" if living else f"processes {holding} still hold GPUs"
            print(f"old service not gone after {args.timeout:g} s: {what}", file=sys.stderr)
            return 1
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
