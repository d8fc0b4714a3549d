"""Recipes: the typed description of a deployment, and ``resolve`` (recipe + cluster + node facts)."""

from forklift.recipe.deployment import Deployment, from_recipe, resolve
from forklift.recipe.load import bundled_names, load, schema, validate
from forklift.recipe.schema import Recipe

__all__ = ["Deployment", "Recipe", "bundled_names", "from_recipe", "load", "resolve", "schema", "validate"]
