"""Which values an SGLang version can take: each candidate is compiled with the version's dialect
on top of the start config and its argv checked against the version's catalog
(:func:`version_checker`; sglang_deploy/tuning/space.py drops what it refuses).

Pure: reads only the version's catalog.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

from sglang_deploy.plan.intents import INTENTS
from sglang_deploy.tuning.dimensions import SPEC_SHAPE, Space

if TYPE_CHECKING:
    from sglang_deploy.plan.profiles import ModelProfile


class VersionCheck(Protocol):
    """What :func:`version_checker` returns: called, why SGLang cannot take ``intent = value``
    (None: it can); ``argv``, the command line that value renders on top of the start config."""

    def __call__(self, intent: str, value: Any) -> str | None: ...

    def argv(self, intent: str, value: Any) -> list[str]: ...


def _base_intents(start: Mapping[str, Any]) -> dict[str, Any]:
    base = {n: d.default for n, d in INTENTS.items()}
    base.update({k: v for k, v in start.items() if k in INTENTS})
    if base.get("tp_size") == "all":
        base["tp_size"] = 1
    return base


class _VersionCheck:
    """A VersionCheck from its two functions (closures over one version and start config)."""

    def __init__(self, check: Callable[[str, Any], str | None], argv: Callable[[str, Any], list[str]]) -> None:
        self._check = check
        self._argv = argv

    def __call__(self, intent: str, value: Any) -> str | None:
        return self._check(intent, value)

    def argv(self, intent: str, value: Any) -> list[str]:
        return self._argv(intent, value)


def version_checker(version: str, start: Mapping[str, Any], model: "ModelProfile | None",
                    model_path: str = "model") -> VersionCheck:
    """A function telling why SGLang ``version`` cannot take ``intent = value`` on top of the
    start config (None: it can), by compiling with the version's dialect and parsing the argv
    with the version's catalog."""
    from sglang_deploy.plan.catalog import load_catalog
    from sglang_deploy.plan.dialects import DialectError, compile_intents

    catalog = load_catalog(version)
    base = _base_intents(start)
    algo = base.get("speculative_algorithm")

    def compiled(intents: Mapping[str, Any]) -> tuple[list[str], list[str]]:
        out = compile_intents(version, catalog, intents, model_path, model)
        return out.argv, out.warnings

    def check(intent: str, value: Any) -> str | None:
        intents = dict(base)
        intents[intent] = value
        if intent in SPEC_SHAPE and intents.get("speculative_algorithm") is None:
            intents["speculative_algorithm"] = algo or "NEXTN"
        if intent == "speculative_algorithm" or intent in SPEC_SHAPE:
            intents = Space((), ()).normalize(intents, start)
            if intent in SPEC_SHAPE:
                intents[intent] = value
        try:
            argv, warnings = compiled(intents)
        except DialectError as exc:
            return str(exc)
        mine = [w for w in warnings if w.startswith(intent) and "not rendered" in w]
        if mine:
            return mine[0]
        rejections = catalog.check(argv)
        if rejections:
            return f"SGLang {version}'s parser refuses it: {rejections[0]}"
        return None

    def argv(intent: str, value: Any) -> list[str]:
        return compiled({**base, intent: value})[0]

    return _VersionCheck(check, argv)
