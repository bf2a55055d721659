"""The blueprint: an admin's description of a cluster, as a typed and validated model."""

from hpckit.blueprint.errors import BlueprintError, Problem
from hpckit.blueprint.loader import load_blueprint, load_site_vars, parse_blueprint
from hpckit.blueprint.models import Blueprint, Partition
from hpckit.blueprint.schema import blueprint_schema, blueprint_schema_json

__all__ = [
    "Blueprint",
    "BlueprintError",
    "Partition",
    "Problem",
    "blueprint_schema",
    "blueprint_schema_json",
    "load_blueprint",
    "load_site_vars",
    "parse_blueprint",
]
