"""`notifier dev`'s ready block, read as a person reads it: one labelled line per address."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tests.support.cli import RunningCli

FIRST = "notifier dev is ready"
LAST = "Ctrl-C to stop"
_ROW = re.compile(r"^  (\w+) +(\S.*)$")


@dataclass(frozen=True)
class Ready:
    """The block's rows by label, and the block's lines as printed."""

    rows: dict[str, str]
    lines: list[str]

    @property
    def url(self) -> str:
        return self.rows["API"]

    @property
    def key(self) -> str:
        # The key is the row's first word; a pointer to its file follows it.
        return self.rows["key"].split()[0]

    @property
    def links(self) -> str:
        return self.rows["links"]

    @property
    def bounces_port(self) -> int:
        found = re.fullmatch(r"smtp://127\.0\.0\.1:(\d+)", self.rows["bounces"])
        assert found, self.rows["bounces"]
        return int(found.group(1))

    @property
    def database(self) -> str:
        return self.rows["database"]


def parse_ready(stdout: list[str]) -> Ready:
    """The ready block among `stdout`'s lines (the first whole one)."""
    start = stdout.index(FIRST)
    end = stdout.index(LAST, start)
    block = stdout[start : end + 1]
    rows = {}
    for line in block[1:-1]:
        found = _ROW.match(line)
        assert found, f"not a labelled row: {line!r}"
        rows[found.group(1)] = found.group(2)
    return Ready(rows, block)


async def wait_until_ready(cli: RunningCli) -> Ready:
    """Wait (callers bound it) for dev's ready block on stdout, and read it."""
    await cli.wait_for_line(LAST, stream="stdout")
    return parse_ready(cli.stdout_lines)
