"""Recipes: the typed description of a deployment."""

from forklift.recipe.load import bundled_names, load, schema, validate
from forklift.recipe.schema import Recipe

__all__ = ["Recipe", "bundled_names", "load", "schema", "validate"]
