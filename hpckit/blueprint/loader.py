"""Load a blueprint: YAML with positions -> vars resolved -> model + cross checks, every problem located."""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from hpckit.blueprint.checks import cross_checks
from hpckit.blueprint.errors import BlueprintError, Path_, Problem
from hpckit.blueprint.models import Blueprint
from hpckit.blueprint.refs import resolve_vars
from hpckit.blueprint.source import Located, decode, load_located


def _read(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BlueprintError([Problem(str(path), 1, 1, "(document)", f"cannot read: {exc}")]) from None
    return decode(data, str(path))


def load_site_vars(paths: Iterable[Path]) -> dict[str, Any]:
    """Per-site files: a mapping with a `vars:` section (later files win)."""
    merged: dict[str, Any] = {}
    for path in paths:
        doc = load_located(_read(path), str(path))
        if doc.problems:
            raise BlueprintError(doc.problems)
        data = doc.data if isinstance(doc.data, dict) else None
        extra = sorted(set(data) - {"vars"}) if data is not None else []
        if extra:
            raise BlueprintError([doc.problem((extra[0],), "unknown key; a site file holds only `vars:`", key=True)])
        if data is None or not isinstance(data.get("vars", {}), dict):
            raise BlueprintError([doc.problem((), "a site file must be a mapping with a `vars:` section")])
        merged.update(data.get("vars") or {})
    return merged


def load_blueprint(path: Path, site_files: Sequence[Path] = (), site_vars: dict[str, Any] | None = None) -> Blueprint:
    """Load and validate one blueprint; site files (or already-loaded site vars) set its vars."""
    merged = {**load_site_vars(site_files), **(site_vars or {})}
    return parse_blueprint(_read(path), str(path), merged)


def parse_blueprint(text: str, file: str = "<blueprint>", site_vars: dict[str, Any] | None = None) -> Blueprint:
    """Validate a blueprint; raise BlueprintError listing every problem found."""
    doc = load_located(text, file)
    if not isinstance(doc.data, dict):
        raise BlueprintError([doc.problem((), "a blueprint must be a YAML mapping (name:, provider:, ...)")])
    data, problems = resolve_vars(doc, site_vars or {})
    problems += doc.problems + cross_checks(doc, data)
    # A value whose reference failed is already reported; its type error would only repeat it.
    unresolved = {p.path for p in problems}
    try:
        model = Blueprint.model_validate(data)
    except ValidationError as exc:
        located = (_locate(doc, data, err) for err in exc.errors(include_url=False))
        problems += [p for p in located if p.path not in unresolved]
        raise BlueprintError(problems) from None
    if problems:
        raise BlueprintError(problems)
    return model


# --- pydantic error -> located problem -----------------------------------------------------------------


def _locate(doc: Located, data: Any, err: ErrorDetails) -> Problem:
    path = _data_path(data, err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden":
        return doc.problem(path, _unknown_key(path, err["loc"]), key=True)
    if kind == "missing":
        return doc.problem(path[:-1], f"missing required key {path[-1]!r}", key=True)
    message = err["msg"].removeprefix("Value error, ")
    if kind.endswith(("_type", "_parsing")) or kind in {"literal_error", "union_tag_invalid", "enum"}:
        message += f" (got {_show(err.get('input'))})"
    return doc.problem(path, message)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _data_path(data: Any, loc: tuple[int | str, ...]) -> Path_:
    """Drop the parts of pydantic's location that are not in the document (union tags, validator names)."""
    out: list[str | int] = []
    node = data
    for part in loc:
        if _has(node, part):
            node = node[part]
        elif not (isinstance(node, dict) and part == loc[-1]):
            continue  # not in the document; a missing or unknown last key is kept
        out.append(part)
    return tuple(out)


def _has(node: Any, part: int | str) -> bool:
    if isinstance(node, dict):
        return part in node
    return isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)


def _unknown_key(path: Path_, loc: tuple[int | str, ...]) -> str:
    key = str(path[-1]) if path else "?"
    fields = _fields_at(loc[:-1])
    close = difflib.get_close_matches(key, fields, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else (f"; expected one of: {', '.join(fields)}" if fields else "")
    return f"unknown key {key!r}{hint}"


def _fields_at(loc: tuple[int | str, ...]) -> list[str]:
    """The field names of the model that pydantic was validating at `loc`."""
    current: Any = Blueprint
    for part in loc:
        current = _step(current, part)
        if current is None:
            return []
    model = _as_model(current, None)
    return list(model.model_fields) if model else []


def _step(tp: Any, part: int | str) -> Any:
    model = _as_model(tp, part)
    if model is not None:
        if isinstance(part, str) and part in model.model_fields:
            return model.model_fields[part].annotation
        return model  # a union tag: stay on the member it selected
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is list and args:
        return args[0]
    if origin is dict and len(args) == 2:
        return args[1]
    if origin is typing.Annotated:
        return _step(args[0], part)
    return None


def _as_model(tp: Any, tag: int | str | None) -> type[BaseModel] | None:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return _as_model(args[0], tag)
    if origin in (typing.Union, types.UnionType):
        models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        for model in models:
            literal = model.model_fields.get("type")
            if literal is not None and tag in typing.get_args(literal.annotation):
                return model
        return models[0] if len(models) == 1 else None
    return None
