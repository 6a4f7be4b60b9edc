"""SIMULATED stand-ins for what this machine lacks: GPUs and the SGLang server.

The product's demo (``sglang-deploy demo``) and its tests use them; a real GPU
host never does (no module outside this package imports it, but the demo's).

- ``nvml/``: a stand-in ``pynvml`` module (and ``nvidia-smi``) answering from
  ``boards/``, NVML profiles written from public board specifications (not recordings;
  boards/README.md says how), so the deploy's GPU probe runs unchanged;
- ``sglang_server/``: the simulated SGLang server, built into one wheel per
  version (the released versions' flag parsers from the catalogs, SGLang's HTTP
  API, no model) and installed by the deploy's own install step; its
  performance model (``sglang_server/src/sglang/_sim/perf.py``) is read on the
  controller through ``perf_model.py``;
- ``hub/``: a stand-in for the Hugging Face Hub's HTTP API (model info, file
  resolve with ranges, gated repos, revisions) serving recorded public
  checkpoints' metadata (``hub/checkpoints``, each with its provenance);
- ``sysfs.py``: a sysfs PCI tree (the GPUs' bridges, their ACS control, IOMMU groups) laid out as
  the kernel lays it out, holding recorded machines' values, for the PCIe reader
  (``deploy/host/pcie_paths.py``);
- ``testbed/``: throwaway hosts (systemd-nspawn over a tmpfs overlay, real
  systemd and sshd) staged as GPU servers with the two above.
"""
