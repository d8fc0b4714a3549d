"""``forklift patch``: vLLM source patches that know their versions, detect drift and revert cleanly."""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.table import Table

from forklift import patches
from forklift.cli.common import JsonOpt, console, print_json
from forklift.patches.core import PatchState
from forklift.patches.operations import Tree
from forklift.runner import LocalRunner
from forklift.runner.ssh import SshRunner

patch_app = typer.Typer(help="Apply, verify, revert and check vLLM source patches.", no_args_is_help=True)

IdsArg = Annotated[list[str], typer.Argument(help="Patch ids (see `forklift patch list`) or patch YAML files.")]
OptIdsArg = Annotated[list[str] | None, typer.Argument(help="Patch ids; default: every known patch.")]
PythonOpt = Annotated[str | None, typer.Option("--python", help="Python whose vLLM to patch (default: this one).")]
SshOpt = Annotated[str | None, typer.Option("--ssh", help="Patch the vLLM on this SSH target (user@host[:port]).")]
RootOpt = Annotated[str | None, typer.Option("--root", help="Patch this vllm package directory directly.")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Check everything, write nothing.")]
IgnoreVersionOpt = Annotated[bool, typer.Option(
    "--ignore-version", help="Apply outside the patch's vLLM range (dev builds); anchors still guard.")]

WORDS = {"applicable": "applies", "applied": "applied", "present": "present (no patch needed)",
         "drift": "DRIFT", "vanished": "target vanished", "modified": "modified since applied"}
STYLE = {"applicable": "green", "applied": "green", "present": "cyan", "drift": "red", "vanished": "yellow",
         "modified": "red"}


def _tree(python: str | None, ssh: str | None, root: str | None) -> Tree:
    if root:
        return patches.dir_tree(root)
    runner = SshRunner(ssh) if ssh else LocalRunner()
    return patches.open_tree(runner, python or ("python3" if ssh else sys.executable))


def _all_ids(ids: list[str] | None) -> list[patches.Patch]:
    return patches.get(ids) if ids else list(patches.catalog().values())


def _cell(st: PatchState) -> str:
    word = f"[{STYLE[st.status]}]{WORDS[st.status]}[/]"
    return word + ("" if st.in_range else " [dim](outside range)[/]" if st.in_range is False else " [dim](?)[/]")


def _details(rows: list[tuple[str, PatchState]]) -> None:
    for label, st in rows:
        for f in st.files:
            for p in f.problems:
                console.print(f"  {label}: {f.rel or f.module}: {p}", markup=False, highlight=False, soft_wrap=True)


@patch_app.command("list")
def list_cmd(json_out: JsonOpt = False) -> None:
    """Every known patch: id, vLLM range, files, what it fixes."""
    cat = patches.catalog()
    if json_out:
        print_json([p.model_dump(mode="json", exclude={"files"}) | {"modules": [f.modules[0] for f in p.files]}
                    for p in cat.values()])
        return
    table = Table("id", "vllm", "files", "fixes")
    table.columns[0].no_wrap = True
    for p in cat.values():
        summary = p.description.split(". ")[0]
        table.add_row(p.id, p.vllm, "\n".join(f.modules[0].rsplit(".", 1)[-1] + ".py" for f in p.files),
                      summary if len(summary) <= 90 else summary[:87] + "...")
    console.print(table)


@patch_app.command("show")
def show_cmd(patch_id: Annotated[str, typer.Argument(help="Patch id.")], json_out: JsonOpt = False) -> None:
    """The patch definition (its YAML)."""
    (p,) = patches.get([patch_id])
    if json_out:
        print_json(p.model_dump(mode="json"))
        return
    sys.stdout.write(patches.spec.source_text(p))


@patch_app.command("apply")
def apply_cmd(ids: IdsArg, python: PythonOpt = None, ssh: SshOpt = None, root: RootOpt = None,
              dry_run: DryRunOpt = False, ignore_version: IgnoreVersionOpt = False, json_out: JsonOpt = False) -> None:
    """Apply and verify patches (all checked first; a second apply is a no-op)."""
    tree = _tree(python, ssh, root)
    done = patches.apply(tree, patches.get(ids), dry_run=dry_run, ignore_version=ignore_version)
    if json_out:
        print_json([a.to_json() for a in done])
        return
    for a in done:
        console.print(f"{a.id}: {a.action} on {tree.label} (vLLM {a.vllm_version}): "
                      + ", ".join(f.path for f in a.files), markup=False, highlight=False)


@patch_app.command("verify")
def verify_cmd(ids: IdsArg, python: PythonOpt = None, ssh: SshOpt = None, root: RootOpt = None,
               json_out: JsonOpt = False) -> None:
    """Check that each patch's behaviour is present; exit 1 if one is not."""
    results = patches.verify(_tree(python, ssh, root), patches.get(ids))
    if json_out:
        print_json([r.__dict__ for r in results])
    else:
        for r in results:
            console.print(f"{r.id}: {'ok' if r.ok else 'NOT PRESENT: ' + '; '.join(r.problems)}", markup=False)
    if not all(r.ok for r in results):
        raise typer.Exit(1)


@patch_app.command("revert")
def revert_cmd(ids: IdsArg, python: PythonOpt = None, ssh: SshOpt = None, root: RootOpt = None,
               dry_run: DryRunOpt = False, json_out: JsonOpt = False) -> None:
    """Restore the original files byte for byte (refuses if they changed since patching)."""
    results = patches.revert(_tree(python, ssh, root), patches.get(ids), dry_run=dry_run)
    if json_out:
        print_json([r.__dict__ for r in results])
        return
    for r in results:
        console.print(f"{r.id}: {r.action}" + (f" ({', '.join(r.files)})" if r.files else ""), markup=False)


@patch_app.command("status")
def status_cmd(ids: OptIdsArg = None, python: PythonOpt = None, ssh: SshOpt = None, root: RootOpt = None,
               json_out: JsonOpt = False) -> None:
    """Each patch's state on a vLLM install: applies / applied / present / drift / target vanished."""
    tree = _tree(python, ssh, root)
    states = patches.status(tree, _all_ids(ids))
    if json_out:
        print_json({"target": tree.label, "vllm_version": tree.version, "patches": [s.to_json() for s in states]})
        return
    table = Table("patch", f"{tree.label} (vLLM {tree.version})")
    for st in states:
        table.add_row(st.patch_id, _cell(st))
    console.print(table)
    _details([(st.patch_id, st) for st in states])


@patch_app.command("check")
def check_cmd(
    against: Annotated[list[str], typer.Option("--against", help="A release, vllm==X (repeatable).")],
    ids: OptIdsArg = None,
    python: Annotated[str | None, typer.Option("--python", help="Also check this Python's installed vLLM.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Compatibility table of patches across vLLM releases (fetched once, cached; nothing is written)."""
    extra = None
    if python:
        installed = patches.open_tree(LocalRunner(), python)
        extra = {f"installed ({installed.version})": installed}
    versions = [patches.releases.parse_requirement(a) for a in against]
    report = patches.check_releases(versions, _all_ids(ids), extra=extra)
    if json_out:
        print_json(report.to_json())
        return
    table = Table("patch", "range", *report.versions)
    for p in report.patches:
        table.add_row(p.id, p.vllm, *(_cell(report.cells[(p.id, v)]) for v in report.versions))
    console.print(table)
    _details([(f"{pid} @ {v}", st) for (pid, v), st in report.cells.items()])


@patch_app.command("entrypoint")
def entrypoint_cmd(ids: IdsArg, python: Annotated[str, typer.Option("--python")] = "python3",
                   ignore_version: IgnoreVersionOpt = False) -> None:
    """Print the docker entrypoint wrapper that applies these patches in a container, then execs vLLM."""
    sys.stdout.write(patches.render_entrypoint(patches.get(ids), python=python, ignore_version=ignore_version))


def register(app: typer.Typer) -> None:
    app.add_typer(patch_app, name="patch")
