"""Every plpgsql function the query catalogue calls by name has each of its parameters
bound by name, against the functions the migrations really made: a parameter renamed,
added or reordered in a migration fails here, not silently in production."""

from __future__ import annotations

import re

import asyncpg
import pytest

from notifier.storage.queries import arguments, bound_names, catalogue

pytestmark = pytest.mark.anyio

# `notifier.request_v3(` followed by at least one `name =>`: a call in named notation.
_NAMED_CALL = re.compile(r"notifier\.([a-z_0-9]+)\(\s*[a-z_0-9]+\s*=>")
_BINDING = re.compile(r"\b([a-z_][a-z0-9_]*)\s*=>")
NAMED_CALLS = {
    name: _NAMED_CALL.search(body).group(1)  # type: ignore[union-attr]
    for name, body in catalogue().items()
    if _NAMED_CALL.search(body)
}


def test_the_hot_statements_call_their_functions_by_name() -> None:
    assert {"request_verification", "confirm_token", "claim_by_ids", "complete_attempts"} <= set(
        NAMED_CALLS
    )


async def in_parameters(db: asyncpg.Connection, function: str) -> list[str]:
    names: list[str] = await db.fetchval(
        """SELECT array_agg(a.name ORDER BY a.n)
           FROM pg_proc p
           JOIN pg_namespace ns ON ns.oid = p.pronamespace AND ns.nspname = 'notifier'
           CROSS JOIN LATERAL unnest(p.proargnames, p.proargmodes) WITH ORDINALITY
                AS a(name, mode, n)
           WHERE p.proname = $1 AND coalesce(a.mode, 'i') IN ('i', 'b', 'v')""",
        function,
    )
    assert names, f"notifier.{function} does not exist"
    return names


@pytest.mark.parametrize("statement", sorted(NAMED_CALLS))
async def test_a_named_call_binds_every_parameter_of_its_function_once(
    db: asyncpg.Connection, statement: str
) -> None:
    body = catalogue()[statement]
    bound = _BINDING.findall(body)
    assert len(bound) == len(set(bound)), f"{statement} binds a parameter twice"
    assert sorted(bound) == sorted(await in_parameters(db, NAMED_CALLS[statement]))


def test_arguments_are_ordered_by_the_parameters_they_bind() -> None:
    values = {"p_token_hash": b"h", "p_apply": True}
    assert bound_names("confirm_token") == {1: "p_token_hash", 2: "p_apply"}
    assert arguments("confirm_token", values) == [b"h", True]


@pytest.mark.parametrize(
    "values",
    [{"p_token_hash": b"h"}, {"p_token_hash": b"h", "p_apply": True, "p_extra": 1}],
    ids=["a name missing", "a name unknown"],
)
def test_arguments_refuse_a_missing_or_unknown_name(values: dict[str, object]) -> None:
    with pytest.raises(TypeError, match="confirm_token"):
        arguments("confirm_token", values)
