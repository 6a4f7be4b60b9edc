"""What the deploy's proof on the host (sglang_deploy/deploy/host/prove_argv.py) is told about the host:
the GPUs the deploy probed (SGLang's resolution asks for them; the proof answers instead of
touching a GPU) and the service's Hugging Face hub cache (where a staged checkpoint's
config.json is, for SGLang's model-config checks)."""

from __future__ import annotations

import posixpath

from sglang_deploy.plan.hostplan import Plan


def service_hub_cache(plan: Plan) -> str:
    """The hub cache the service reads: ``HF_HUB_CACHE``, else ``HF_HOME``/hub, else the
    service user's ``~/.cache/huggingface/hub`` (its home is the working directory); the
    defaults of huggingface_hub/constants.py."""
    if plan.env.get("HF_HUB_CACHE"):
        return plan.env["HF_HUB_CACHE"]
    home = plan.env.get("HF_HOME") or posixpath.join(plan.service.workdir, ".cache", "huggingface")
    return posixpath.join(home, "hub")


def proof_options(plan: Plan) -> list[str]:
    """prove_argv.py's options for this plan."""
    g = plan.gpus
    return ["--gpus", str(len(g.indices)), "--gpu-name", g.model, "--capability", g.compute_capability,
            "--memory-mib", str(g.memory_mib), "--hf-hub-cache", service_hub_cache(plan)]
