"""The compile-cache seed's glue (what and why: ``sglang_deploy/lifecycle/cache_seed.py``). Only in
a rollout, which names the seed directory on the controller (``RunContext.cache_seed_dir``):

- prepare (``decide``): a host whose version's cache directory is empty takes the seed of its key
  when one is there, else offers its own caches once its gate passes;
- before the stop (``import_callback``): the seed is copied to the host, its sha256 checked there,
  and unpacked into the version's cache directory by the service user (``setpriv``, as the
  caches are written: a name in the tar cannot make root write anywhere). A seed that does not
  arrive whole is said and left out: the host starts cold, as it would have;
- after a passing gate (``export_callback``): the host's version cache directory, packed on the
  host, fetched, its digest checked against the host's, written under its digest, and the key's
  manifest claimed (``O_EXCL``: the first host of the class to pass wins, a second one's tar is
  removed).
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from typing import Any

from pyinfra.api.host import Host

from sglang_deploy.deploy import caches
from sglang_deploy.deploy.gating import sh
from sglang_deploy.deploy.weights import file_sha256
from sglang_deploy.lifecycle import cache_seed
from sglang_deploy.lifecycle.cache_seed import SeedPlan
from sglang_deploy.runcontext import from_environ as run_context
from sglang_deploy.untrusted import UntrustedInput, read_text_file

TMP_PREFIX = "/tmp/sglang-seed."


def decide(plan: Any, caches_state: str) -> SeedPlan | None:
    """The host's part in its class's seed (None: not a rollout, or no cache directory planned)."""
    seed_dir = run_context().cache_seed_dir
    if seed_dir is None or plan.caches is None:
        return None
    key = cache_seed.seed_key(plan)
    manifest = cache_seed.manifest_path(seed_dir, key)
    if not os.path.lexists(manifest):
        return SeedPlan(key, seed_dir, offer=caches_state == "cold")
    try:
        seed = cache_seed.parse_manifest(read_text_file(manifest, "seed manifest", cache_seed.MANIFEST_MAX_BYTES),
                                         key, manifest)
    except (UntrustedInput, ValueError, OSError) as exc:
        return SeedPlan(key, seed_dir, note=f"the seed of this class is unreadable ({exc}): starting as it is")
    if caches_state != "cold":
        return SeedPlan(key, seed_dir, note=f"the version's caches hold something already: not seeded ({caches_state})")
    return SeedPlan(key, seed_dir, take=seed)


def say_callback(state, host: Host, text: str) -> bool:
    host.log(text)
    return True


def import_callback(state, host: Host, p: Any, seed: SeedPlan) -> bool:
    """Copy, verify and unpack the seed into the version's cache directory; never fails the host."""
    assert seed.take is not None and p.plan.caches is not None
    take, q = seed.take, shlex.quote
    local = cache_seed.tar_path(seed.seed_dir, seed.key, take.sha256)
    ok, out = sh(host, f"mktemp -d {TMP_PREFIX}XXXXXXXX")
    remote = out.strip()
    if not ok or not remote.startswith(TMP_PREFIX):
        host.log("compile caches not seeded: no temporary directory on the host; starting cold")
        return True
    try:
        if not host.put_file(local, f"{remote}/seed.tar", print_output=False, print_input=False):
            raise OSError("the copy to the host failed")
        unpack = caches.as_user(p.plan.service, ["tar", "-C", p.plan.caches.dir, "-xf", "-", "--no-same-owner",
                                                 "--no-same-permissions", "--warning=no-timestamp"])
        ok, out = sh(host, f"cd {q(remote)} && s=$(sha256sum seed.tar | cut -c1-64) && "
                           f"if [ \"$s\" != {q(take.sha256)} ]; then echo \"sha256 $s\"; exit 1; fi && "
                           f"{unpack} < seed.tar && echo unpacked")
    except OSError as exc:
        ok, out = False, f"{type(exc).__name__}: {exc}"
    finally:
        sh(host, f"rm -rf {q(remote)}")
    if ok and out.strip().endswith("unpacked"):
        host.log(f"compile caches seeded: {take.describe()}, verified on the host")
    else:
        host.log(f"compile caches not seeded ({out.strip()[-200:] or 'copy failed'}): starting cold")
    return True


def export_callback(state, host: Host, p: Any, seed: SeedPlan, ctx: Any) -> bool:
    """Offer this host's caches as its class's seed; never fails the host."""
    assert p.plan.caches is not None
    manifest = cache_seed.manifest_path(seed.seed_dir, seed.key)
    if os.path.exists(manifest):
        return True
    q, directory = shlex.quote, p.plan.caches.dir
    ok, out = sh(host, f"[ -n \"$(find {q(directory)} -type f -print -quit 2>/dev/null)\" ] && "
                       f"du -sb {q(directory)} 2>/dev/null | cut -f1")
    if not out.strip():  # the start compiled nothing into it: nothing to offer
        return True
    size = int(out.strip()) if ok and out.strip().isdigit() else None
    if size is None or size > cache_seed.MAX_SEED_BYTES:
        host.log(f"compile caches not offered to the class ({'unknown size' if size is None else f'{size} bytes'}, "
                 f"at most {cache_seed.MAX_SEED_BYTES})")
        return True
    ok, out = sh(host, f"mktemp -d {TMP_PREFIX}XXXXXXXX")
    remote = out.strip()
    if not ok or not remote.startswith(TMP_PREFIX):
        return True
    fd, partial = tempfile.mkstemp(dir=seed.seed_dir, prefix=".partial-")
    os.close(fd)
    try:
        ok, out = sh(host, f"tar -C {q(directory)} -cf {q(remote)}/seed.tar . && sha256sum {q(remote)}/seed.tar "
                           f"| cut -c1-64 && stat -c %s {q(remote)}/seed.tar")
        lines = out.split()
        if not ok or len(lines) != 2 or not lines[1].isdigit() or int(lines[1]) > cache_seed.MAX_SEED_BYTES:
            host.log(f"compile caches not offered to the class: could not pack them ({out.strip()[-200:]})")
            return True
        digest, size = lines[0], int(lines[1])
        if not host.get_file(f"{remote}/seed.tar", partial, print_output=False, print_input=False):
            host.log("compile caches not offered to the class: the copy from the host failed")
            return True
        got = file_sha256(partial)
        if got != digest or os.path.getsize(partial) != size:
            host.log(f"compile caches not offered: the copy's sha256 {got[:12]} is not the host's {digest[:12]}")
            return True
        tar = cache_seed.tar_path(seed.seed_dir, seed.key, digest)
        os.replace(partial, tar)
        start = (ctx.gate.downtime or {}).get("start_s")  # the start that compiled them
        doc = cache_seed.Seed(seed.key, digest, size, host.name, p.plan.sglang_version,
                              float(start) if isinstance(start, (int, float)) and start > 0 else None).as_dict()
        try:
            with open(manifest, "x", encoding="utf-8") as fh:  # claimed once: the first host to pass wins
                json.dump(doc, fh)
        except FileExistsError:  # another host of the class passed first: its tar is the seed
            if not _names(manifest, digest):
                os.unlink(tar)
            return True
        host.log(f"compile caches kept for the other hosts of this class: {size} bytes (sha256 {digest[:12]})")
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
        sh(host, f"rm -rf {q(remote)}")
    return True


def _names(manifest: str, digest: str) -> bool:
    try:
        with open(manifest, encoding="utf-8") as fh:
            return digest in fh.read(cache_seed.MANIFEST_MAX_BYTES)
    except OSError:
        return False
