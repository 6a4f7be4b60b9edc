"""The planner's layers, lowest first: one value that names them, in the order they apply.

Every intent starts at SGLang's own default; each layer above may set it again, and the
last one to set it wins (its name is the intent's ``layer`` in a plan). Once all have
applied, the rules' ``enforce`` parts switch off what the hardware cannot do and the
model-facts layer drops what the checkpoint cannot do (planner.py). The planner iterates
:data:`LAYERS`, ``plan --explain`` reads the names from it, and :func:`markdown` shows it
in the docs.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence


@dataclass(frozen=True)
class Layer:
    name: str
    source: str  # where its values come from, one line
    inventory: bool = False  # written in the inventory's sglang_intents: errors name that field


LAYERS: tuple[Layer, ...] = (
    Layer("sglang-default", "SGLang's own default for every intent, with why (sglang_deploy/plan/intents.py)"),
    Layer("arch", "the GPU architecture's profile (sglang_deploy/data/arch/): its intents, then its rules"),
    Layer("topology", "the topology rules (sglang_deploy/data/topology.yaml): GPU count, interconnect, P2P, "
                      "memory tier"),
    Layer("model-facts", "the checkpoint's own metadata (config.json, weight index): TP, EP, static memory "
                         "fraction and context length sized from its numbers (sglang_deploy/plan/facts_layer.py)"),
    Layer("model", "the model rules (sglang_deploy/data/model_rules.yaml), then the model profile "
                   "(sglang_deploy/data/models/): its rules and fallback sizing where no checkpoint facts answer, "
                   "then its settings; the model's id as the served name when SGLang loads a staged snapshot"),
    Layer("tuned", "the tuning record `sglang-deploy tune` measured on this host's hardware class "
                   "(NAME.tuning.yaml beside the inventory NAME.py)"),
    Layer("group", "the inventory's group data (sglang_intents), and a tp group's ranks and rendezvous "
                   "(sglang_tp_group)", inventory=True),
    Layer("host", "the inventory's host data (sglang_intents)", inventory=True),
    Layer("trial", "one trial of a tuning run (the run context's trial file), set by the tuner only"),
)

NAMES: tuple[str, ...] = tuple(layer.name for layer in LAYERS)
DEFAULT = LAYERS[0].name
#: The layers written in the inventory (group, host).
INVENTORY: tuple[str, ...] = tuple(layer.name for layer in LAYERS if layer.inventory)
#: The width of the longest name (the layer column of ``plan``).
WIDTH = max(len(name) for name in NAMES)


def field(layer: str, intent: str) -> str:
    """How an error names a value by the layer that set it: the inventory field, or the layer."""
    return f"sglang_intents.{intent}" if layer in INVENTORY else f"{intent} ({layer} layer)"


def markdown() -> str:
    """The layers as a Markdown table, lowest first (for the docs)."""
    rows = ["| # | Layer | Where its values come from |", "|---|---|---|"]
    rows += [f"| {i} | `{layer.name}` | {layer.source.replace('|', '&#124;')} |" for i, layer in enumerate(LAYERS, 1)]
    return "\n".join(rows) + "\n"


def chain() -> str:
    """The layers in one line, lowest first: how the README's concepts state the order."""
    return " < ".join(f"`{name}`" for name in NAMES)


#: The generated parts of the docs: marker name -> what goes between its two markers.
GENERATED = {"layer stack": markdown, "layer chain": chain}
DOCS_FILES = ("README.md", "docs/planning.md")


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}: generated from sglang_deploy/plan/layers.py -->", f"<!-- end {name} -->"


def regenerate(text: str) -> str:
    """``text`` with every generated part it has (between its markers) written anew."""
    for name, render in GENERATED.items():
        start, end = _markers(name)
        head = start.split(":")[0] + ":"
        i = text.find(head)
        while i >= 0:
            j = text.find(end, i)
            if j < 0:
                raise ValueError(f"{start[:30]}... has no {end}")
            body = render()
            body = f"\n{body}" if body.endswith("\n") else body  # a table on lines of its own
            text = text[:i] + start + body + end + text[j + len(end):]
            i = text.find(head, i + len(start) + len(body) + len(end))
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sglang_deploy.plan.layers",
                                     description="Print the planner's layer stack, or regenerate it in the docs.")
    parser.add_argument("--update-docs", nargs="*", metavar="FILE",
                        help=f"rewrite the generated parts of these files in place (default: {', '.join(DOCS_FILES)})")
    args = parser.parse_args(argv)
    if args.update_docs is None:
        sys.stdout.write(markdown())
        return 0
    for name in args.update_docs or DOCS_FILES:
        path = Path(name)
        text = path.read_text(encoding="utf-8")
        new = regenerate(text)
        if new != text:
            path.write_text(new, encoding="utf-8")
    return 0


__all__ = ["DEFAULT", "INVENTORY", "LAYERS", "Layer", "NAMES", "WIDTH", "chain", "field", "markdown", "regenerate"]


if __name__ == "__main__":
    sys.exit(main())
