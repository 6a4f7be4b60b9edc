"""A benchmark's table of rows, as the table scripts print it: a Markdown table, or aligned columns."""

from __future__ import annotations

from typing import Sequence


def print_table(head: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool) -> None:
    if markdown:
        print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
        for r in rows:
            print("| " + " | ".join(r) + " |")
        return
    widths = [max(len(x[i]) for x in [head, *rows]) for i in range(len(head))]
    for r in [head, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
