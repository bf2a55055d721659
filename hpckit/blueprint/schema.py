"""JSON Schema of the blueprint, for editors (yaml-language-server) and other tools."""

from __future__ import annotations

import json
from typing import Any

from hpckit.blueprint.models import Blueprint


def blueprint_schema() -> dict[str, Any]:
    schema = Blueprint.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


def blueprint_schema_json() -> str:
    return json.dumps(blueprint_schema(), indent=2, sort_keys=True) + "\n"
