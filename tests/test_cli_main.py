"""The ``dmsgw`` entry point: which family each command belongs to, and what a command costs.

A command builds only its own family's parser, so ``dmsgw invoke`` does not import the
gateway's configuration and servers that only ``dmsgw serve`` needs.
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from dmsgw import cli


@pytest.mark.parametrize("module", sorted(set(cli.COMMANDS.values())))
def test_each_family_adds_the_commands_the_table_gives_it(module: str) -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    importlib.import_module(f"dmsgw.cli.{module}").register(sub)
    assert set(sub.choices) == {c for c, m in cli.COMMANDS.items() if m == module}


def test_a_client_command_does_not_import_the_gateway() -> None:
    probe = (
        "import sys; from dmsgw.cli import build_parser; build_parser('invoke'); "
        "print(sorted(m for m in ('dmsgw.interlink.configuration.serve_config', "
        "'dmsgw.cli.serve', 'dmsgw.cli.cap') if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"


def test_an_unknown_command_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["invok"])
    err = capsys.readouterr().err
    assert all(f"'{command}'" in err for command in cli.COMMANDS)
