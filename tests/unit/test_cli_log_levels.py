"""How much each command logs: services keep their record, commands for a person stay quiet."""

from __future__ import annotations

import argparse
import logging

import pytest

from notifier.cli import SERVICES, build_parser, log_level


def _commands() -> list[str]:
    parser = build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(commands.choices)


def test_every_service_named_is_a_command() -> None:
    assert set(_commands()) >= SERVICES


@pytest.mark.parametrize("command", sorted(SERVICES))
def test_a_service_logs_from_info_up(command: str) -> None:
    assert log_level(command, verbose=False) == logging.INFO


@pytest.mark.parametrize("command", [c for c in _commands() if c not in SERVICES])
def test_a_command_for_a_person_logs_only_warnings_and_errors(command: str) -> None:
    assert log_level(command, verbose=False) == logging.WARNING


@pytest.mark.parametrize("command", _commands())
def test_verbose_logs_debug_detail_for_every_command(command: str) -> None:
    assert log_level(command, verbose=True) == logging.DEBUG


@pytest.mark.parametrize(
    "argv",
    [
        ["-v", "migrate"],
        ["migrate", "-v"],
        ["stats", "--json", "--verbose"],
        ["keys", "-v", "list"],
        ["keys", "list", "-v"],
        ["webhooks", "remove", "some-id", "-v"],
    ],
)
def test_verbose_is_taken_before_or_after_the_command(argv: list[str]) -> None:
    assert build_parser().parse_args(argv).verbose is True


@pytest.mark.parametrize("argv", [["migrate"], ["keys", "list"], ["webhooks", "list"]])
def test_without_verbose_a_command_is_not_verbose(argv: list[str]) -> None:
    assert build_parser().parse_args(argv).verbose is False
