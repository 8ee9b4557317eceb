"""A strict reader of the GitHub Markdown tables in an experiment's report.md, for the tests."""

from __future__ import annotations

import re

_CELL_SEPARATOR = re.compile(r"(?<!\\)\|")  # a pipe not escaped as \|


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in _CELL_SEPARATOR.split(line.strip())[1:-1]]


def markdown_tables(text: str) -> list[list[list[str]]]:
    """Every table of ``text`` as rows of cells (header first, the ---|--- line dropped). AssertionError when a
    table's rows do not all have the header's number of cells, or its second line is not the separator."""
    tables, block = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            block.append(line)
            continue
        if block:
            rows = [_cells(row) for row in block]
            assert len(rows) >= 2 and all(set(c) <= set("-:") and c for c in rows[1]), f"no separator: {block[:2]}"
            widths = {len(row) for row in rows}
            assert widths == {len(rows[0])}, f"a table with rows of {sorted(widths)} cells: {block[0]}"
            tables.append([rows[0], *rows[2:]])
            block = []
    return tables
