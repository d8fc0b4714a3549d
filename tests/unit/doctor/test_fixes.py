"""Every command a fix names exists: `forklift ...` subcommands and flags parsed against the real CLI, and
every catalog patch id a fix names is in the catalog."""

from __future__ import annotations

import re
import shlex

import pytest
import typer
from typer import _click  # the click typer ships (pyproject pins typer 0.29, which vendors it)
from typer.core import TyperGroup

from forklift.cli.main import app
from forklift.doctor import load_categories, load_rules
from forklift.patches import catalog

TEXTS = [(f"rule {r.id}", r.fix) for r in load_rules()] + [
    (f"category {c}", f"{i.fix} {i.verify}") for c, i in load_categories().items()]
TEXTS += [("engine patch context", "Check it on each node with `forklift patch status X` and across releases with "
           "`forklift patch check X`; `forklift patch apply X`")]
COMMAND = re.compile(r"`(forklift [^`]+)`")


def _root() -> TyperGroup:
    cmd = typer.main.get_command(app)
    assert isinstance(cmd, TyperGroup)
    return cmd


def resolve(argv: list[str]) -> tuple[_click.Command, list[str]]:
    """The command an argv reaches and the tokens left for it (unknown subcommands raise)."""
    cmd: _click.Command = _root()
    rest = argv[1:]
    while isinstance(cmd, TyperGroup) and rest and not rest[0].startswith("-"):
        sub = cmd.get_command(_click.Context(cmd), rest[0])
        if sub is None:
            raise AssertionError(f"no subcommand {rest[0]!r} in `{shlex.join(argv)}`")
        cmd, rest = sub, rest[1:]
    return cmd, rest


def check_command(text: str) -> None:
    argv = shlex.split(text)
    cmd, rest = resolve(argv)
    assert not isinstance(cmd, TyperGroup), f"`{text}` stops at a group"
    options = {o for p in cmd.params for o in p.opts + p.secondary_opts}
    for tok in rest:
        if tok.startswith("-"):
            assert tok.split("=", 1)[0] in options, f"`{text}`: {cmd.name} has no option {tok}"


@pytest.mark.parametrize(("where", "text"), TEXTS, ids=[w for w, _ in TEXTS])
def test_every_forklift_command_in_a_fix_exists(where: str, text: str) -> None:
    for command in COMMAND.findall(text):
        check_command(command)
    loose = re.findall(r"(?<!`)\bforklift (\w[\w-]*)", COMMAND.sub("", text))
    names = set(_root().list_commands(_click.Context(_root())))
    assert set(loose) <= names, f"{where} names a forklift command that does not exist: {loose}"


def test_the_checker_refuses_commands_that_do_not_exist() -> None:
    with pytest.raises(AssertionError):
        check_command("forklift node prepare")
    with pytest.raises(AssertionError):
        check_command("forklift down RUN --no-such-flag")
    check_command("forklift node apply --profile gb10")


@pytest.mark.parametrize(("where", "text"), TEXTS, ids=[w for w, _ in TEXTS])
def test_patch_ids_named_in_fixes_are_catalog_entries(where: str, text: str) -> None:
    known = set(catalog())
    named = re.findall(r"patches: \[([\w-]+)\]", text) + re.findall(r"forklift patch \w+ ([a-z][\w-]+)", text)
    assert set(named) - {"X"} <= known, f"{where}: unknown patch ids {set(named) - known}"
