"""``forklift recipe schema|show|list``."""

from __future__ import annotations

import typer
import yaml
from rich.table import Column, Table

from forklift import recipe as recipes
from forklift.cli.common import JsonOpt, RecipeArg, SetOpt, console, print_json
from forklift.errors import RecipeError

recipe_app = typer.Typer(help="Inspect recipes: the typed description of a deployment.", no_args_is_help=True)


@recipe_app.command("schema")
def schema_cmd() -> None:
    """Print the recipe JSON Schema."""
    print_json(recipes.schema())


@recipe_app.command("show")
def show_cmd(recipe: RecipeArg = None, set_: SetOpt = None, json_out: JsonOpt = False) -> None:
    """Print a recipe as resolved (extends and --set applied)."""
    resolved = recipes.load(recipe, set_ or [])
    data = resolved.model_dump(mode="json")
    if json_out:
        print_json(data)
    else:
        console.print(yaml.safe_dump(data, sort_keys=False), markup=False, highlight=False)


@recipe_app.command("validate")
def validate_cmd(recipe: RecipeArg = None, set_: SetOpt = None, json_out: JsonOpt = False) -> None:
    """Check a recipe (and its cluster file) without planning or starting anything; exit 2 naming each problem."""
    try:
        deployment = recipes.resolve(recipe, set_ or [])
    except RecipeError as exc:
        if json_out:  # the problems on stdout too, for a script; the error (and exit 2) as always
            print_json({"ok": False, "error": str(exc), "problems": exc.problems or [str(exc)], "fix": exc.fix})
        raise
    if json_out:
        print_json({"ok": True, "name": deployment.name, "origin": deployment.origin})
    else:
        console.print(f"ok: {deployment.name} ({deployment.origin}) is a valid recipe", highlight=False)


@recipe_app.command("list")
def list_cmd(json_out: JsonOpt = False) -> None:
    """List bundled recipes."""
    rows = []
    for name in recipes.bundled_names():
        r = recipes.load(name)
        rows.append({"name": name, "model": r.model.source, "nodes": len(r.nodes),
                     "tp": r.parallel.tp, "pp": r.parallel.pp, "description": r.description or ""})
    short = {row["name"]: _first_sentence(str(row["description"])) for row in rows}
    if json_out:
        print_json(rows)
        return
    table = Table(Column("name", no_wrap=True), Column("model", overflow="fold"), "nodes", "tp", "pp",
                  Column("description", ratio=1))
    for row in rows:
        table.add_row(*(str(row[k]) for k in ("name", "model", "nodes", "tp", "pp")), short[str(row["name"])])
    console.print(table)


def _first_sentence(text: str, limit: int = 80) -> str:
    first = text.split(". ")[0]
    return first if len(first) <= limit else first[: limit - 1] + "…"


def register(app: typer.Typer) -> None:
    app.add_typer(recipe_app, name="recipe")
