"""Peer transfers over PCIe only where the bridges let them through (issue 33 item 2, its sysfs
half): the probe's PCIe reader against a stand-in sysfs tree (sglang_deploy/simulator/sysfs.py)
holding recorded ACS values, the planner's judgement (plan/pcie.py) and the topology rule that
turns custom allreduce off and sets NCCL_P2P_DISABLE=1 where ACS redirects peer requests.

The recorded machine is NVIDIA/nccl#2079's: two GPUs under AMD GPP bridges whose ACS control
read 0x001d, an allreduce that hung until ACS was cleared. The GPUs here are the simulated
NVML's RTX A6000 board without its NVLink bridge (the recorded GPUs, RTX 5880 Ada, are not in
data/gpus.yaml): ACS is the bridges' property, not the GPUs'."""

from __future__ import annotations

import copy
import io
import json
import os
import tempfile
from pathlib import Path

import pytest

from sglang_deploy.deploy.facts import GpuProbe
from sglang_deploy.deploy.host import gpu_probe, pcie_paths
from sglang_deploy.errors import PlanError
from sglang_deploy.plan import pcie
from sglang_deploy.plan.hardware import parse_probe
from sglang_deploy.plan.output import print_plan
from sglang_deploy.plan.planner import plan_host
from sglang_deploy.plan.render import render
from sglang_deploy.plan.spec import build_spec
from sglang_deploy.simulator import sysfs

from tests.conftest import ROOT

BOARDS = ROOT / "sglang_deploy" / "simulator" / "boards"
MODEL = {"sglang_model": "Qwen/Qwen3-32B", "sglang_intents": {"tp_size": 2}}
BUS = ("00000000:41:00.0", "00000000:61:00.0")  # as NVML writes nccl#2079's GPUs' addresses


@pytest.fixture
def probe_on(tmp_path, monkeypatch):
    """The GPU probe and the PCIe reader, in process, against the simulated NVML's A6000 pair
    without a bridge at the recorded GPUs' addresses and a sysfs tree, their printed answers read
    as the deploy's fact reads the command's output: returns the probe's JSON."""
    from sglang_deploy.simulator.nvml import pynvml as nvml

    board = json.loads((BOARDS / "a6000x2-bridge.json").read_text())
    for gpu, bus in zip(board["gpus"], BUS):
        gpu["pci_bus_id"], gpu["nvlinks"] = bus, []
    board["topology"] = [[None, "NODE"], ["NODE", None]]
    board["p2p"]["NVLINK"] = [[None, "NS"], ["NS", None]]
    path = tmp_path / "nvml.json"
    path.write_text(json.dumps(board))
    monkeypatch.setenv("SGLANG_TESTBED_NVML", str(path))

    def run(tree: sysfs.Tree | None) -> dict:
        root = sysfs.build(Path(tempfile.mkdtemp(dir=tmp_path)), tree) if tree is not None else tmp_path / "none"
        nvml.nvmlInit()
        try:
            printed = json.dumps(gpu_probe.probe_nvml(nvml), indent=1)
        finally:
            nvml.nvmlShutdown()
        read = json.dumps(pcie_paths.read(str(root)))
        lines = [*printed.splitlines(), "SGLANG_DEPLOY_RC=0", "SGLANG_DEPLOY_PCIE", read]
        return GpuProbe().process(lines)

    return run


def plan(probe: dict | None, **data):
    return plan_host(build_spec("h1", {}, {**MODEL, **data}), probe=probe, sglang_version="0.5.23")


def p2p_settings(p) -> tuple:
    return p.intents["custom_all_reduce"].value, p.intents["nccl_p2p_disable"].value


def tree(name: str, acs: dict) -> sysfs.Tree:
    """A recorded tree with some bridges' ACS control replaced."""
    base = sysfs.RECORDED[name]
    return sysfs.Tree(base.gpus, {**base.acs, **acs}, base.source)


# ---------------------------------------------------------------------------
# the probe's reader


def test_the_probe_reads_the_recorded_bridges_acs_and_iommu(probe_on):
    probe = probe_on(sysfs.RECORDED["nccl-2079-acs-redirect"])
    assert probe["topology"]["links"] == [["X", "NODE"], ["NODE", "X"]]
    assert probe["topology"]["p2p_read"] == [[None, True], [True, None]]  # NVML's word: P2P OK
    assert probe["pcie"] == {
        "gpus": [{"index": 0, "bridges": ["0000:40:01.1"], "iommu": "DMA"},
                 {"index": 1, "bridges": ["0000:60:01.1"], "iommu": "DMA"}],
        "acs": {"0000:40:01.1": 0x001D, "0000:60:01.1": 0x001D}}
    assert pcie.acs_words(0x001D) == "SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+"  # as nccl#2079 printed it


def test_lspci_words_and_the_register_agree():
    # recorded ACSCtl lines: nccl#2079's bridges, and nccl#606's SrcValid-only ports
    assert sysfs.acs_control("ACSCtl: SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- "
                             "DirectTrans-") == 0x001D
    assert sysfs.acs_control("SrcValid+ TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-") == 1
    with pytest.raises(ValueError):
        sysfs.acs_control("SrcValid? TransBlk-")


def test_no_sysfs_entry_or_another_vendor_at_the_address_is_no_pcie(probe_on, tmp_path):
    assert "pcie" not in probe_on(None)  # a container, a host without sysfs: the field is absent
    other = sysfs.build(tmp_path / "other", sysfs.RECORDED["nccl-2079-acs-redirect"], gpu_vendor=sysfs.AMD)
    assert pcie_paths.read(str(other)) == {"devices": {}, "acs": {}, "rdma": []}  # not NVIDIA's: not a GPU
    assert pcie.for_gpus(json.dumps(pcie_paths.read(str(other))), list(BUS)) is None
    # what the reader printed is untrusted: anything but its JSON object is no answer
    for text in ("", "[]", "{", '{"devices": [], "acs": {}}', "x" * 1_000_001):
        assert pcie.for_gpus(text, list(BUS)) is None


def test_config_space_past_64_bytes_needs_root_and_a_bad_list_ends():
    space = sysfs.config_space(sysfs.AMD, 0x001D)
    assert pcie_paths.acs_in_config(space, 4096) == 0x001D
    assert pcie_paths.acs_in_config(space[:64], 4096) == "UNREADABLE"  # what a reader without root gets
    assert pcie_paths.acs_in_config(sysfs.config_space(sysfs.AMD, None), 4096) is None  # AER, no ACS
    looping = bytearray(space)
    looping[0x100:0x104] = (0x0001 | 1 << 16 | 0x100 << 20).to_bytes(4, "little")  # next: itself
    assert pcie_paths.acs_in_config(bytes(looping), 4096) is None
    wild = bytearray(space)
    wild[0x100:0x104] = (0x0001 | 1 << 16 | 0xFFC << 20).to_bytes(4, "little")  # next past the end
    assert pcie_paths.acs_in_config(bytes(wild), 4096) is None


def test_a_conventional_bridge_has_no_acs(tmp_path):
    t = tree("nccl-2079-acs-redirect", {"0000:40:01.1": "conventional"})
    got = pcie_paths.read(str(sysfs.build(tmp_path / "sys", t)))
    assert got["acs"] == {"0000:40:01.1": None, "0000:60:01.1": 0x001D}
    assert sorted(got["devices"]) == ["0000:41:00.0", "0000:61:00.0"]


# ---------------------------------------------------------------------------
# the plan


def test_acs_redirect_turns_custom_allreduce_off_and_nccl_p2p_off_naming_the_bridges(probe_on):
    good = plan(probe_on(sysfs.RECORDED["nccl-2079-acs-cleared"]))
    assert good.pcie.status == pcie.CLEAR and p2p_settings(good) == (True, False)
    bad = plan(probe_on(sysfs.RECORDED["nccl-2079-acs-redirect"]))
    assert bad.pcie.status == pcie.BROKEN and p2p_settings(bad) == (False, True)
    reason = bad.intents["nccl_p2p_disable"].reason
    assert "0000:40:01.1 (ACS control 0x001d: SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+)" in reason
    assert "between GPUs 0-1" in reason and bad.nccl_conf.get("NCCL_P2P_DISABLE") == "1"
    assert "NCCL_P2P_DISABLE" not in good.nccl_conf
    assert "--disable-custom-all-reduce" in bad.argv and "--disable-custom-all-reduce" not in good.argv
    # what else the plan says: the IOMMU translates both GPUs' DMA (recorded: the report's IOMMU was on)
    assert any(w.startswith("IOMMU translates the DMA of GPUs 0, 1 (iommu group type DMA)") for w in bad.warnings)
    assert plan(probe_on(sysfs.RECORDED["nccl-2079-acs-cleared"])).argv == good.argv


def test_the_redirect_wins_over_inventory_data_with_a_warning(probe_on):
    p = plan(probe_on(sysfs.RECORDED["nccl-2079-acs-redirect"]),
             sglang_intents={"tp_size": 2, "custom_all_reduce": True})
    assert p2p_settings(p) == (False, True)
    assert any(w.startswith("custom_all_reduce=True (host layer) overridden to False") and "ACS" in w
               for w in p.warnings)


def test_only_the_bits_that_redirect_count(probe_on):
    # SrcValid alone (nccl#606's ports) redirects nothing: the kernel's p2pdma test is RR, CR and EC
    for value, status in ((0x0001, pcie.CLEAR), (0x0010, pcie.CLEAR), (0x0004, pcie.BROKEN), (0x0008, pcie.BROKEN),
                          (0x0020, pcie.BROKEN)):
        p = plan(probe_on(tree("nccl-2079-acs-cleared", {"0000:60:01.1": value})))
        assert p.pcie.status == status, (hex(value), p.pcie.detail)


def test_an_unreadable_bridge_keeps_the_plan_and_says_why(probe_on):
    probe = probe_on(sysfs.RECORDED["nccl-2079-acs-cleared"])
    probe["pcie"]["acs"]["0000:60:01.1"] = "UNREADABLE"
    p = plan(probe)
    assert p.pcie.status == pcie.UNKNOWN and p2p_settings(p) == (True, False)
    assert "0000:60:01.1 could not be read (configuration space past 64 bytes needs root)" in p.pcie.detail


def test_the_common_switch_counts_a_root_port_above_it_does_not():
    # two GPUs under one switch: requests turn at the switch, the root port above never sees them
    paths = ("0000:00:01.0", "0000:01:00.0", "0000:02:08.0"), ("0000:00:01.0", "0000:01:00.0", "0000:02:10.0")
    assert pcie.between(*paths) == ("0000:02:08.0", "0000:02:10.0", "0000:01:00.0")
    assert pcie.between(("0000:40:01.1",), ("0000:60:01.1",)) == ("0000:40:01.1", "0000:60:01.1")
    gpus = (pcie.GpuPath(paths[0], "identity"), pcie.GpuPath(paths[1], "identity"))
    links, p2p = [["X", "PXB"], ["PXB", "X"]], [[None, True], [True, None]]
    root_only = pcie.Pcie(gpus, {"0000:00:01.0": 0x001D, "0000:01:00.0": 0, "0000:02:08.0": 0, "0000:02:10.0": 0})
    assert pcie.judge((0, 1), links, p2p, root_only, "probe:nvml").status == pcie.CLEAR
    port = pcie.Pcie(gpus, {**root_only.acs, "0000:02:10.0": 0x000C})
    assert pcie.judge((0, 1), links, p2p, port, "probe:nvml").status == pcie.BROKEN


def test_nvlink_pairs_p2p_less_pairs_and_declared_hardware():
    gpus = (pcie.GpuPath(("0000:40:01.1",), None), pcie.GpuPath(("0000:60:01.1",), None))
    bad = pcie.Pcie(gpus, {"0000:40:01.1": 0x001D, "0000:60:01.1": 0x001D})
    p2p = [[None, True], [True, None]]
    assert pcie.judge((0, 1), [["X", "NV4"], ["NV4", "X"]], p2p, bad, "probe:nvml").status == pcie.UNUSED
    assert pcie.judge((0, 1), [["X", "PHB"], ["PHB", "X"]], [[None, False], [False, None]], bad,
                      "probe:nvml").status == pcie.UNUSED
    assert pcie.judge((0,), [["X", "PHB"], ["PHB", "X"]], p2p, bad, "probe:nvml").status == pcie.UNUSED
    assert pcie.judge((0, 1), [["X", "PHB"], ["PHB", "X"]], p2p, None, "declared").status == pcie.UNKNOWN
    # the shipped boards: bridged A6000s, NVSwitch H100s, P2P-less 4090s plan as before
    from tests.conftest import load_probe
    for name in ("a6000x2-bridge", "h100x8-nvswitch", "rtx4090x2-pcie"):
        p = plan_host(build_spec("h1", {}, {"sglang_model": "Qwen/Qwen3-8B"}), probe=load_probe(name),
                      sglang_version="0.5.23")
        assert p.pcie.status in (pcie.UNUSED, pcie.UNKNOWN), (name, p.pcie)


def test_plan_explain_and_json_say_it(probe_on):
    p = plan(probe_on(sysfs.RECORDED["nccl-2079-acs-redirect"]))
    out = io.StringIO()
    print_plan(p, render(p), False, out)
    assert "PCIe P2P  broken: ACS redirects peer requests on bridges 0000:40:01.1" in out.getvalue()
    assert "drivers/pci/p2pdma.c" not in out.getvalue()
    out = io.StringIO()
    print_plan(p, render(p), True, out)
    assert "drivers/pci/p2pdma.c pci_bridge_has_acs_redir" in out.getvalue()  # the rule's source
    assert p.as_dict()["pcie_p2p"]["status"] == "broken"


# ---------------------------------------------------------------------------
# a probe's field is untrusted


@pytest.mark.parametrize("change, field", [
    (lambda x: x.update(gpus="all"), "probe.pcie.gpus"),
    (lambda x: x["gpus"].pop(), "probe.pcie.gpus"),
    (lambda x: x["gpus"][1].update(index=0), "probe.pcie.gpus[1]"),
    (lambda x: x["gpus"][0].update(bridges=["0000:40:01.1; rm -rf /"]), "probe.pcie.gpus[0].bridges"),
    (lambda x: x["gpus"][0].update(bridges=["0000:40:01.1"] * 17), "probe.pcie.gpus[0].bridges"),
    (lambda x: x["gpus"][0].update(bridges=["0000:50:01.1"]), "probe.pcie.gpus[0].bridges"),
    (lambda x: x["gpus"][0].update(iommu="\x1b[31mred"), "probe.pcie.gpus[0].iommu"),
    (lambda x: x["acs"].update({"0000:40:01.1": 70000}), "probe.pcie.acs['0000:40:01.1']"),
    (lambda x: x["acs"].update({"0000:40:01.1": True}), "probe.pcie.acs['0000:40:01.1']"),
    (lambda x: x["acs"].update({"bridge": 0}), "probe.pcie.acs"),
    (lambda x: x.update(acs={f"0000:{i // 32:02x}:{i % 32:02x}.0": 0 for i in range(2048)}), "probe.pcie.acs"),
])
def test_a_malformed_pcie_field_is_refused_naming_host_and_field(probe_on, change, field):
    probe = probe_on(sysfs.RECORDED["nccl-2079-acs-redirect"])
    bad = copy.deepcopy(probe)
    change(bad["pcie"])
    with pytest.raises(PlanError) as err:
        parse_probe("h1", bad)
    assert err.value.host == "h1" and err.value.field == field, (err.value.field, str(err.value))
    assert "\x1b" not in str(err.value)


# ---------------------------------------------------------------------------
# SGLang's own P2P test: its result files (custom_all_reduce_utils.py gpu_p2p_access_check) feed the plan

BOOT = 1_765_000_000


def _result(root, version: str, devices: str, pairs: dict, mtime: int) -> None:
    """A result file where SGLang writes it (SGLANG_CACHE_DIR: the version's cache directory), in its
    format (json.dump of {"i->j": bool} over the visible devices)."""
    path = root / f"sglang-{version}" / f"gpu_p2p_access_cache_for_{devices}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(pairs, indent=4))
    os.utime(path, (mtime, mtime))


def test_the_reader_reports_sglangs_results_bounded(tmp_path):
    _result(tmp_path, "0.5.23", "0,1", {"0->0": True, "0->1": False, "1->0": False, "1->1": True}, BOOT + 60)
    _result(tmp_path, "0.5.19", "2,3", {"0->1": True, "1->0": True}, BOOT - 60)
    (tmp_path / "sglang-0.5.23" / "gpu_p2p_access_cache_for_x.json").write_text("{}")  # not SGLang's name
    (tmp_path / "sglang-0.5.23" / "gpu_p2p_access_cache_for_4,5.json").write_text("x" * 70_000)  # too big
    (tmp_path / "elsewhere").mkdir()
    got = pcie_paths.sglang_p2p_tests(str(tmp_path))
    assert [(t["file"], t["pairs"]) for t in got] == [
        ("sglang-0.5.19/gpu_p2p_access_cache_for_2,3.json", {"0->1": True, "1->0": True}),
        ("sglang-0.5.23/gpu_p2p_access_cache_for_0,1.json", {"0->0": True, "0->1": False, "1->0": False,
                                                             "1->1": True})]
    assert pcie_paths.sglang_p2p_tests(str(tmp_path / "missing")) == []


def test_results_since_boot_become_pairs_of_nvml_indices(tmp_path):
    _result(tmp_path, "0.5.23", "2,3", {"0->1": False, "1->0": True}, BOOT + 60)
    _result(tmp_path, "0.5.19", "0,1", {"0->1": False, "1->0": False}, BOOT - 60)  # before the boot: not read
    read = {"devices": {}, "acs": {}, "sglang_p2p": pcie_paths.sglang_p2p_tests(str(tmp_path)), "boot_time": BOOT}
    got = pcie.for_gpus(json.dumps(read), [None] * 4)
    assert got is not None and got["sglang_p2p_test"] == {
        "failed": [[2, 3]], "passed": [[3, 2]], "files": ["sglang-0.5.23/gpu_p2p_access_cache_for_2,3.json"]}
    assert all(g["bridges"] is None for g in got["gpus"])  # no sysfs paths; the test's word stands alone
    assert pcie.for_gpus(json.dumps({**read, "boot_time": BOOT + 3600}), [None] * 4) is None  # all older
    # a GPU the host does not have (now): the pair is dropped, not the plan
    got = pcie.for_gpus(json.dumps(read), [None] * 3)
    assert got is not None and got["sglang_p2p_test"]["failed"] == [] and got["sglang_p2p_test"]["passed"] == []


def test_a_failed_sglang_test_turns_p2p_off_a_passed_one_keeps_it(probe_on):
    probe = probe_on(sysfs.RECORDED["nccl-2079-acs-cleared"])
    files = ["sglang-0.5.23/gpu_p2p_access_cache_for_0,1.json"]
    probe["pcie"]["sglang_p2p_test"] = {"failed": [[1, 0]], "passed": [[0, 1]], "files": files}
    bad = plan(probe)
    assert bad.pcie.status == pcie.BROKEN and p2p_settings(bad) == (False, True)
    assert ("SGLang's own P2P test failed between GPUs 0-1 (sglang-0.5.23/gpu_p2p_access_cache_for_0,1.json in the "
            "cache directory, written since the last boot)") in bad.intents["nccl_p2p_disable"].reason
    probe["pcie"]["sglang_p2p_test"] = {"failed": [], "passed": [[0, 1], [1, 0]], "files": files}
    good = plan(probe)
    assert good.pcie.status == pcie.CLEAR and p2p_settings(good) == (True, False)
    assert good.pcie.detail.startswith("SGLang's own P2P test passed between GPUs 0-1")
    # ACS that redirects wins over a passing test: the kernel's word on the path, the test's on one copy
    probe = probe_on(sysfs.RECORDED["nccl-2079-acs-redirect"])
    probe["pcie"]["sglang_p2p_test"] = {"failed": [], "passed": [[0, 1], [1, 0]], "files": files}
    assert plan(probe).pcie.status == pcie.BROKEN and "ACS redirects" in plan(probe).pcie.detail


@pytest.mark.parametrize("test, field", [
    ("yes", "probe.pcie.sglang_p2p_test"),
    ({"failed": [[0, 0]], "passed": [], "files": ["sglang-0.5.23/gpu_p2p_access_cache_for_0,1.json"]},
     "probe.pcie.sglang_p2p_test.failed"),
    ({"failed": [[0, 7]], "passed": [], "files": ["sglang-0.5.23/gpu_p2p_access_cache_for_0,1.json"]},
     "probe.pcie.sglang_p2p_test.failed"),
    ({"failed": [], "passed": [[0, True]], "files": ["sglang-0.5.23/gpu_p2p_access_cache_for_0,1.json"]},
     "probe.pcie.sglang_p2p_test.passed"),
    ({"failed": [], "passed": [], "files": ["../../etc/shadow"]}, "probe.pcie.sglang_p2p_test.files"),
    ({"failed": [], "passed": [], "files": []}, "probe.pcie.sglang_p2p_test.files"),
])
def test_a_malformed_test_result_is_refused(probe_on, test, field):
    probe = probe_on(sysfs.RECORDED["nccl-2079-acs-cleared"])
    probe["pcie"]["sglang_p2p_test"] = test
    with pytest.raises(PlanError) as err:
        parse_probe("h1", probe)
    assert err.value.field == field, str(err.value)


def test_the_deploy_removes_results_from_before_the_boot_as_the_service_user():
    from sglang_deploy.deploy.caches import ensure_command
    from sglang_deploy.plan.caches import Caches
    from sglang_deploy.plan.spec import ServiceSettings

    command = ensure_command(Caches("/var/lib/sglang/cache", "0.5.23"), ServiceSettings())
    assert command.endswith("'gpu_p2p_access_cache_for_*.json'")
    assert ("setpriv --reuid=sglang --regid=sglang --init-groups sh -c" in command
            and "/var/lib/sglang/cache/sglang-0.5.23 'gpu_p2p" in command and '! -newermt "@$b" -delete' in command)


def test_the_reader_waits_on_no_fifo_follows_no_link_and_finds_btime_past_long_lines(tmp_path):
    version = tmp_path / "sglang-0.5.23"
    version.mkdir()
    os.mkfifo(version / "gpu_p2p_access_cache_for_0,1.json")  # a service user's trap: must not block
    (tmp_path / "elsewhere.json").write_text(json.dumps({"0->1": False}))
    (version / "gpu_p2p_access_cache_for_2,3.json").symlink_to(tmp_path / "elsewhere.json")
    assert pcie_paths.sglang_p2p_tests(str(tmp_path)) == []
    stat = tmp_path / "stat"
    stat.write_text("cpu  1 2 3\nintr " + " ".join(["0"] * 200_000) + "\nctxt 5\nbtime 1765000000\nprocesses 9\n")
    assert pcie_paths.boot_time(str(stat)) == 1_765_000_000
    stat.write_text("cpu  1 2 3\n")
    assert pcie_paths.boot_time(str(stat)) is None


def test_0_5_9s_results_are_read_from_the_service_users_home(tmp_path):
    # SGLang 0.5.9 has no SGLANG_CACHE_DIR: custom_all_reduce_utils.py gpu_p2p_access_check writes
    # expanduser("~/.cache/sglang")/gpu_p2p_access_cache_for_<devices>.json, the service user's home
    # (the workdir). The reader takes both places, the version directories first, 16 files in all.
    _result(tmp_path / "cache", "0.5.23", "0,1", {"0->1": True, "1->0": True}, BOOT + 60)
    home = tmp_path / "home" / ".cache" / "sglang"
    home.mkdir(parents=True)
    (home / "gpu_p2p_access_cache_for_2,3.json").write_text(json.dumps({"0->1": False, "1->0": False}, indent=4))
    os.utime(home / "gpu_p2p_access_cache_for_2,3.json", (BOOT + 90, BOOT + 90))
    (home / "sglang-0.5.23").mkdir()  # a version directory under home is not read from there
    got = pcie_paths.sglang_p2p_tests(str(tmp_path / "cache"), str(home))
    assert [t["file"] for t in got] == ["sglang-0.5.23/gpu_p2p_access_cache_for_0,1.json",
                                        "~/.cache/sglang/gpu_p2p_access_cache_for_2,3.json"]
    assert [t["file"] for t in pcie_paths.sglang_p2p_tests(None, str(home))] == [
        "~/.cache/sglang/gpu_p2p_access_cache_for_2,3.json"]
    read = {"devices": {}, "acs": {}, "sglang_p2p": got, "boot_time": BOOT}
    paths = pcie.for_gpus(json.dumps(read), [None] * 4)
    assert paths is not None and paths["sglang_p2p_test"]["failed"] == [[2, 3], [3, 2]]
    assert paths["sglang_p2p_test"]["files"][1] == "~/.cache/sglang/gpu_p2p_access_cache_for_2,3.json"


def test_a_failed_0_5_9_test_in_the_home_turns_p2p_off_and_says_where(probe_on):
    probe = probe_on(sysfs.RECORDED["nccl-2079-acs-cleared"])
    probe["pcie"]["sglang_p2p_test"] = {"failed": [[0, 1]], "passed": [],
                                        "files": ["~/.cache/sglang/gpu_p2p_access_cache_for_0,1.json"]}
    bad = plan(probe)
    assert bad.pcie.status == pcie.BROKEN and p2p_settings(bad) == (False, True)
    assert ("(~/.cache/sglang/gpu_p2p_access_cache_for_0,1.json in the service user's home, written since the "
            "last boot)") in bad.intents["nccl_p2p_disable"].reason
    for name in ("~/.cache/sglang/../gpu_p2p_access_cache_for_0,1.json", "~/gpu_p2p_access_cache_for_0,1.json"):
        probe["pcie"]["sglang_p2p_test"] = {"failed": [], "passed": [], "files": [name]}
        with pytest.raises(PlanError) as err:
            parse_probe("h1", probe)
        assert err.value.field == "probe.pcie.sglang_p2p_test.files"


def test_the_probe_command_names_both_places():
    from sglang_deploy.deploy.facts import GpuProbe

    command = GpuProbe().command(cache_root="/var/lib/sglang/cache", home_cache="/var/lib/sglang/.cache/sglang")
    assert "--cache-root /var/lib/sglang/cache --home-cache /var/lib/sglang/.cache/sglang" in command
    assert "--home-cache" not in GpuProbe().command(cache_root="/var/lib/sglang/cache")
