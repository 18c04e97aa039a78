"""`kvtune --help` helps: a description and examples, `--version`, help text on every flag of every
command, and the same `--database-url` on every command that opens the database."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from kvtune.cli import build_parser

DATABASE_COMMANDS = ("serve", "worker", "db", "export")


def _commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_top_level_help_has_a_description_examples_and_a_version(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    text = parser.format_help()
    assert "quantized KV caches" in text and "examples:" in text and "kvtune demo" in text
    with pytest.raises(SystemExit) as e:
        parser.parse_args(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("kvtune ")


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_flag_of_every_command_says_what_it_does(name: str) -> None:
    parser = _commands()[name]
    undocumented = [a.dest for a in parser._actions if not a.help and not isinstance(a, argparse._HelpAction)]
    assert undocumented == []
    # Flags with a real default show it in the help text.
    text = parser.format_help()
    for a in parser._actions:
        if a.option_strings and a.default not in (None, False) and a.default is not argparse.SUPPRESS:
            assert f"(default: {a.default})" in " ".join(text.split()), (name, a.dest)


@pytest.mark.parametrize("name", DATABASE_COMMANDS)
def test_commands_that_open_the_database_take_database_url(name: str) -> None:
    assert "--database-url" in [o for a in _commands()[name]._actions for o in a.option_strings]


def test_bash_completion_names_every_command_and_flag() -> None:
    out = subprocess.run(["bash", "-c", "source <(\"$0\" -m kvtune.cli completion bash) && complete -p kvtune", sys.executable],
                         capture_output=True, text=True, check=True)
    assert "_kvtune" in out.stdout
    script = subprocess.run([sys.executable, "-m", "kvtune.cli", "completion", "bash"], capture_output=True, text=True,
                            check=True).stdout
    for name, parser in _commands().items():
        assert f"{name})" in script
        for a in parser._actions:
            for o in a.option_strings:
                assert o in script, (name, o)
