"""JSON Schema of the blueprint, for editors (yaml-language-server) and other tools.

The loader replaces `$(vars.NAME)` references before it validates, anywhere below the top level except
in `vars:` itself and in mapping keys: a whole reference may stand for a value of any type, and text
holding one becomes text. So wherever the model wants something other than free text, the schema also
takes a string that holds a reference; otherwise an editor would flag the shipped lab blueprint
(`count: $(vars.gpus_per_node)`).
"""

from __future__ import annotations

import json
from typing import Any

from hpckit.blueprint.models import Blueprint
from hpckit.blueprint.refs import REF

VAR_REF = "VarReference"
_REF_SCHEMA = {
    "type": "string",
    "pattern": REF.pattern,
    "description": "text holding a $(vars.NAME) reference: replaced by the variable's value before validation",
}
# What stays on the outer schema (editors show it) when a field's schema is wrapped in anyOf.
_ANNOTATIONS = ("title", "description", "default", "examples")


def blueprint_schema() -> dict[str, Any]:
    schema = Blueprint.model_json_schema(mode="validation")
    defs = {name: _walk(body) for name, body in schema.pop("$defs", {}).items()}
    schema = _walk(schema)
    schema["properties"]["vars"] = Blueprint.model_json_schema(mode="validation")["properties"]["vars"]
    schema["$defs"] = {**defs, VAR_REF: _REF_SCHEMA}
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema


def blueprint_schema_json() -> str:
    return json.dumps(blueprint_schema(), indent=2, sort_keys=True) + "\n"


def _walk(schema: dict[str, Any]) -> dict[str, Any]:
    """Every value position below `schema` (properties, items, map values) also takes a reference."""
    out = dict(schema)
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: _referable(_walk(v)) for k, v in out["properties"].items()}
    if isinstance(out.get("items"), dict):
        out["items"] = _referable(_walk(out["items"]))
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = _referable(_walk(out["additionalProperties"]))
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(out.get(key), list):
            out[key] = [_walk(v) for v in out[key]]
    if "oneOf" in out:
        # A discriminated union: with references, one document may fit several members (a referenced
        # `type:`), which oneOf would reject; the discriminator keyword is OpenAPI's, not JSON Schema's.
        out["anyOf"] = out.pop("oneOf")
        out.pop("discriminator", None)
    return out


def _referable(schema: dict[str, Any]) -> dict[str, Any]:
    if _free_text(schema):
        return schema
    outer = {k: schema[k] for k in _ANNOTATIONS if k in schema}
    inner = {k: v for k, v in schema.items() if k not in _ANNOTATIONS}
    return {**outer, "anyOf": [inner, {"$ref": f"#/$defs/{VAR_REF}"}]}


def _free_text(schema: dict[str, Any]) -> bool:
    """A plain string with no constraint: any text, a reference included, already fits."""
    constraints = {"pattern", "enum", "const", "format", "maxLength", "minLength"}
    return schema.get("type") == "string" and not constraints & set(schema)
