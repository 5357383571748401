"""The trigger benchmark replays the product's request statements through pgbench."""

from __future__ import annotations

import re

from benchmarks.trigger_cost import REQUEST_STATEMENTS, request_script


def test_every_parameter_of_the_replayed_request_statements_is_filled() -> None:
    script = request_script()
    assert not re.search(r"\$\d", script), script
    # One statement each, committing by itself as the library call does outside a transaction.
    assert script.count(";") == len(REQUEST_STATEMENTS)
