"""Find sbatch templates, read the parameters each declares, and render one with checked values.

A template is `NAME.sbatch.j2`; a file whose name starts with `_` is a partial other templates include.
Each file declares its parameters once, in a Jinja comment at its very top:

    {#- hpckit
    description: what the template runs
    defaults: {nodes: 2}          # new defaults for parameters declared by an included partial
    params:
      script: {type: path, default: train.py, help: the training script}
    -#}

A template's parameters are its own plus those of every partial it includes (recursively). Loading
checks the declarations against the template body: every `p.NAME` it uses is declared, every
declared parameter is used, and every default is a valid value of its type.

A site sets its own defaults for any template that declares the parameter in
/etc/hpckit/template-defaults.yaml (`python: /opt/conda/bin/python`); with `--cluster`, the file on the
cluster's login node is the one read. The lab writes the Python that has torch there.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import meta, nodes
from pydantic import BaseModel, ConfigDict, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from hpckit.errors import InputError
from hpckit.jobs.params import ParamSpec, ParamValue, bind, suggest
from hpckit.jobs.render import Directives, Params, TemplateError, environment
from hpckit.paths import templates_dir

SUFFIX = ".sbatch.j2"
SITE_DIR = Path("/etc/hpckit/sbatch_templates")
SITE_DEFAULTS = Path("/etc/hpckit/template-defaults.yaml")
PATH_ENV = "HPCKIT_TEMPLATE_PATH"
_HEADER = re.compile(r"\A\{#-?[ \t]*hpckit[ \t]*\n(?P<body>.*?)^-?#\}", re.S | re.M)


class _Header(BaseModel):
    model_config = ConfigDict(extra="forbid")

    description: str = ""
    defaults: dict[str, Any] = {}
    params: dict[str, dict[str, Any]] = {}


@dataclass(frozen=True)
class Rendered:
    template: str
    script: str
    values: dict[str, ParamValue]
    # Directories the job writes into that must exist before it starts (log dirs).
    mkdirs: tuple[str, ...]


@dataclass(frozen=True)
class Template:
    name: str
    path: Path
    description: str
    params: dict[str, ParamSpec]
    library: Library
    # The #SBATCH lines written out in the template's and its partials' source, with no value in them.
    literal_directives: frozenset[str] = frozenset()

    def bind(self, given: Mapping[str, object]) -> dict[str, ParamValue]:
        return bind(self.name, self.params, given)

    def render(self, given: Mapping[str, object]) -> Rendered:
        values = self.bind(given)
        directives = Directives()
        try:
            template = self.library.env.get_template(self.path.name)
            script = template.render(p=Params(values), template=self.name, sbatch=directives)
        except jinja2.UndefinedError as exc:
            raise TemplateError(f"{self.path}: {exc.message}") from None
        if not script.startswith("#!"):
            raise TemplateError(f"{self.path}: the rendered script does not start with #!")
        directives.check(script, str(self.path), self.literal_directives)
        mkdirs = tuple(str(values[n]) for n, spec in self.params.items() if spec.mkdir and values[n])
        return Rendered(self.name, script, values, mkdirs)


def search_path() -> list[Path]:
    """Where templates are looked up, first match wins: $HPCKIT_TEMPLATE_PATH, the site dir, then hpckit's own."""
    dirs = [Path(d) for d in os.environ.get(PATH_ENV, "").split(os.pathsep) if d]
    if SITE_DIR.is_dir():
        dirs.append(SITE_DIR)
    dirs.append(templates_dir())
    return dirs


class Library:
    """The templates on a search path, with a site's defaults (parameter -> value) over their own."""

    def __init__(self, dirs: list[Path] | None = None, site_defaults: Mapping[str, Any] | None = None) -> None:
        self.dirs = dirs if dirs is not None else search_path()
        self.env = environment(self.dirs)
        self.site_defaults = dict(site_defaults or {})
        self._loaded: dict[str, Template] = {}

    @cached_property
    def names(self) -> list[str]:
        found: dict[str, Path] = {}
        for directory in self.dirs:
            for path in sorted(directory.glob(f"*{SUFFIX}")):
                found.setdefault(path.name.removesuffix(SUFFIX), path)
        return sorted(found)

    def __iter__(self) -> Iterator[Template]:
        return (self.get(name) for name in self.names)

    def get(self, name: str) -> Template:
        """A template by name, or by the path of a `.sbatch.j2` file (its folder joins the search path)."""
        if name.endswith(SUFFIX):
            if Path(name).is_file():
                return _from_file(Path(name))
            name = Path(name).name.removesuffix(SUFFIX)
        if name not in self.names:
            known = ", ".join(self.names) or "none"
            raise InputError(f"no sbatch template {name!r}{suggest(name, self.names)} (templates: {known})")
        if name not in self._loaded:
            self._loaded[name] = self._load(name)
        return self._loaded[name]

    def source(self, name: str) -> str:
        return self.get(name).path.read_text()

    def _load(self, name: str) -> Template:
        path = self._locate(f"{name}{SUFFIX}")
        header = read_header(path)
        params = {key: _spec(path, key, decl) for key, decl in header.params.items()}
        template_ast = self._parse(path)
        used = _param_refs(template_ast)
        literal = _literal_directives(path)
        for partial in self._partials(template_ast, set()):
            partial_path = self._locate(partial)
            literal |= _literal_directives(partial_path)
            for key, decl in read_header(partial_path).params.items():
                if key in params:
                    raise TemplateError(f"{path}: parameter {key!r} is also declared in {partial_path}")
                params[key] = _spec(partial_path, key, decl)
            used |= _param_refs(self._parse(partial_path))
        params = _with_defaults(path, params, header.defaults)
        site = {key: value for key, value in self.site_defaults.items() if key in params}
        params = _with_defaults(SITE_DEFAULTS, params, site)
        _check_usage(path, params, used)
        return Template(name, path, header.description, params, self, frozenset(literal))

    def _locate(self, filename: str) -> Path:
        for directory in self.dirs:
            if (directory / filename).is_file():
                return directory / filename
        raise TemplateError(f"template file {filename} is not in {', '.join(map(str, self.dirs))}")

    def _parse(self, path: Path) -> nodes.Template:
        try:
            return self.env.parse(path.read_text(), path.name, str(path))
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(f"{path}:{exc.lineno}: {exc.message}") from None

    def _partials(self, template_ast: nodes.Template, seen: set[str]) -> Iterator[str]:
        for name in meta.find_referenced_templates(template_ast):
            if name is None:
                raise TemplateError("templates include partials by literal name only")
            if name in seen:
                continue
            seen.add(name)
            yield name
            yield from self._partials(self._parse(self._locate(name)), seen)


def read_site_defaults(text: str | None, where: str = str(SITE_DEFAULTS)) -> dict[str, Any]:
    """A site's template defaults (a YAML mapping of parameter names to values); {} when there is no file."""
    if not text:
        return {}
    try:
        data = YAML(typ="safe", pure=True).load(text)
    except YAMLError as exc:
        raise TemplateError(f"{where}: not YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise TemplateError(f"{where}: expected a mapping of parameter names to default values")
    return data


def local_site_defaults() -> dict[str, Any]:
    return read_site_defaults(SITE_DEFAULTS.read_text() if SITE_DEFAULTS.is_file() else None)


def _from_file(path: Path) -> Template:
    library = Library([path.resolve().parent, *search_path()])
    return library.get(path.name.removesuffix(SUFFIX))


def read_header(path: Path) -> _Header:
    match = _HEADER.match(path.read_text())
    if not match:
        raise TemplateError(f"{path}: no parameter header (a `{{#- hpckit ... -#}}` comment at the top)")
    try:
        data = YAML(typ="safe", pure=True).load(match.group("body")) or {}
        return _Header.model_validate(data)
    except (YAMLError, ValidationError) as exc:
        raise TemplateError(f"{path}: bad parameter header: {exc}") from None


def _spec(path: Path, name: str, decl: dict[str, Any]) -> ParamSpec:
    try:
        spec = ParamSpec.model_validate({"name": name, **decl})
        spec.convert(spec.default)
    except (ValidationError, InputError) as exc:
        raise TemplateError(f"{path}: parameter {name!r}: {exc}") from None
    if spec.type == "choice" and not spec.choices:
        raise TemplateError(f"{path}: parameter {name!r} is a choice without choices")
    return spec


def _with_defaults(path: Path, params: dict[str, ParamSpec], defaults: dict[str, Any]) -> dict[str, ParamSpec]:
    for key, value in defaults.items():
        if key not in params:
            raise TemplateError(f"{path}: `defaults` names {key!r}, which no included partial declares")
        params[key] = _spec(path, key, {**params[key].model_dump(exclude={"name"}), "default": value})
    return params


def _literal_directives(path: Path) -> set[str]:
    """Source lines that start an #SBATCH (or #SLURM) directive and hold no Jinja: they print as they are."""
    return {
        line
        for line in path.read_text().split("\n")
        if line.startswith(("#SBATCH", "#SLURM")) and not re.search(r"\{\{|\{%|\{#", line)
    }


def _param_refs(template_ast: nodes.Template) -> set[str]:
    return {
        node.attr
        for node in template_ast.find_all(nodes.Getattr)
        if isinstance(node.node, nodes.Name) and node.node.name == "p"
    }


def _check_usage(path: Path, params: dict[str, ParamSpec], used: set[str]) -> None:
    undeclared = sorted(used - set(params))
    if undeclared:
        raise TemplateError(f"{path}: uses undeclared parameter(s) {', '.join(undeclared)}")
    unused = sorted(set(params) - used)
    if unused:
        raise TemplateError(f"{path}: declares parameter(s) it never uses: {', '.join(unused)}")
