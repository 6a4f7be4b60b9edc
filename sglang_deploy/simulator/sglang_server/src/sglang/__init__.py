"""SIMULATED SGLang: a stand-in for the real ``sglang`` package at its parser
and HTTP boundaries, for tests of sglang-deploy (see the README next to
``build.py``).  It loads no model and needs no GPU."""

from sglang.version import __version__

SIMULATED = True

__all__ = ["__version__", "SIMULATED"]
