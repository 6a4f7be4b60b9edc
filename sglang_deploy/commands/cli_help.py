"""What ``sglang-deploy --help`` and ``sglang-deploy COMMAND --help`` print besides the options:
the tool's description and epilog, each command's description with its exit codes, and the
commands' one-line summaries (COMMANDS). The parser that prints them is
sglang_deploy/commands/cli.py.
"""

DESCRIPTION = """\
Deploy the SGLang LLM server to the GPU hosts of a pyinfra inventory. Each
host's launch settings are planned from its GPUs and model; every restarted
server must pass the gate (ready, configured as planned, fast enough) before
its host counts as deployed, and a failed one is rolled back."""

EPILOG = """\
Start with `sglang-deploy plan --explain` (the shipped reference deployment)
or `sglang-deploy demo`. `sglang-deploy COMMAND --help` shows a command's
options and exit codes. The deploy itself is `pyinfra INVENTORY deploy.py`."""

PLAN_DESCRIPTION = """\
Plan every host of a pyinfra inventory offline, from the hardware its data
declares and the model's own checkpoint metadata: each launch setting with the
layer that set it (and, with --explain, why), the server's command line,
warnings, and the files the deploy writes (secrets redacted). No host is
contacted. The model's facts come from a local directory (sglang_model as a
path, or sglang_model_dir), else the Hugging Face Hub (HF_ENDPOINT, metadata
only), else the cache that every Hub fetch fills (see `models fetch`). The
tuning records beside the inventory (INVENTORY's name with .tuning.yaml) give
each host the record of its hardware class as the 'tuned' layer; --explain
says which record applied, or why one did not. --predict aiconfigurator also
asks NVIDIA's aiconfigurator (the optional extra: pip install -e '.[predict]',
x86-64 only) for each host's layout at the gate's workload and prints its
figures beside the plan's own prediction (--json: predicted_aiconfigurator).

exit codes: 0 every host planned; 2 bad input: a host's data is wrong (the
message names the host and the field; the other hosts are still printed), or
the command is (usage, an inventory or a tuning record file that cannot be
loaded, an unknown --host or --sglang-version, --predict without its extra)."""

ROLLOUT_DESCRIPTION = """\
Deploy an inventory wave by wave: the ordinary deploy, limited to each
wave's hosts, every restarted server gated. A 'canary' group is the first
wave; the rollout halts when a wave fails more hosts than --max-fail allows.

exit codes: 0 every host passed; 1 a wave failed more hosts than --max-fail
allows (the last one too), or interrupted; 2 bad input (nothing ran);
3 completed, with failures within --max-fail."""

STATUS_DESCRIPTION = """\
Read every host of an inventory over SSH, in parallel, changing nothing, and
print one row per host: the revision running, deployed and planned now; the
server (unit state, main PID, uptime, restarts, SGLang installed vs planned);
drift of the unit, env file and nccl.conf from the deployed revision's copies;
the last gate (verdict, decode tok/s against its target and baseline).
Secrets are never printed, not in --diff and not in --json (docs/status.md).

exit codes: 0 every host ok; 1 a host drifted, down, half-deployed, never
deployed, its last gate failed, its SGLang differs or a new revision is pending;
2 bad input (inventory, flags), a host that cannot be planned, or a host unreachable."""

TUNE_DESCRIPTION = """\
Search for the best launch settings of one host (a canary) by deploying trial
configurations to it, each through the ordinary deploy (stage, prove, swap,
restart, gate) and measured by the gate at every --concurrency level. The
result is a tuning record next to the inventory (<inventory>.tuning.yaml),
keyed by hardware class, which the planner applies as the "tuned" layer to
every host of that class. At the end, and on Ctrl-C or any failure, the host
returns to the revision it ran before and is gated again, unless --apply
deploys the best configuration found.

exit codes: 0 tuned, host returned (or the winner applied) and gated; 1 the
host could not be returned or the apply failed (the output says what runs);
2 bad input or a host that cannot be tuned (nothing changed); 3 interrupted,
or no trial was feasible (host returned, no record written)."""

CHECK_DESCRIPTION = """\
Gate a running SGLang (or OpenAI-compatible) server, as the deploy does after
every restart: it is ready, configured as planned (--expect), and fast enough
(--target, --baseline).

exit codes: 0 pass; 1 fail (the reason is printed); 2 could not measure, or a
bad argument (checked before the server is contacted)."""

DEMO_DESCRIPTION = """\
Run the reference deployment (inventory/a6000.py) end to end on a throwaway
local host with simulated GPUs and a simulated server: boot the host, deploy
with pyinfra, gate the server, tear the host down. It needs root,
systemd-nspawn and sshd; without them (or with --offline) it prints the
offline plan and gates a simulated server started locally. Its figures show
the gate at work, not SGLang's performance.

exit codes: 0 deploy and gate passed; 1 something failed; 2 the demo cannot
run here."""

MODELS_DESCRIPTION = """\
Manage the controller's cache of model metadata (config.json, the safetensors
index or headers, generation_config.json; never weights), under
$XDG_CACHE_HOME/sglang-deploy/models (else ~/.cache). `models fetch MODEL`
resolves the revision on the Hub (HF_ENDPOINT honoured; a gated model's token
from $HF_TOKEN or --token-file) and stores its metadata, so that a later plan
works with no network.

exit codes: 0 stored; 2 bad arguments, or the Hub did not give the metadata
(the message says why)."""

SAMPLE_GPUS_DESCRIPTION = """\
Record NVML samples of this host's GPUs (clocks, throttling, memory,
processes) until a file appears or time runs out. The deploy runs it on each
GPU host beside the gate; you rarely need it by hand.

exit codes: 0 sampled; 2 bad arguments; 3 NVML could not be read (the output
file says why)."""

#: The commands in the order `--help` lists them, each with its one-line summary.
COMMANDS = (
    ("plan", "plan every host of an inventory offline, from declared hardware"),
    ("rollout", "deploy an inventory in waves, canary first, every server gated"),
    ("status", "every host's revision, server, drift and last gate, read without changing anything"),
    ("tune", "search one canary host for the best settings, remembered per hardware class"),
    ("check", "gate a running server: ready, configured as planned, fast enough"),
    ("demo", "the reference deployment end to end on a throwaway local host"),
    ("models", "fetch a model's checkpoint metadata into the controller's cache"),
    ("sample-gpus", "record GPU clocks, throttling and memory beside a gate"),
)
