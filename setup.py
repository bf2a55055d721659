"""Packaging detail pyproject.toml cannot express: ship the top-level ansible/, sbatch_templates/ and
blueprints/ folders inside the package (as hpckit._assets.*) so an installed hpckit finds them (see
hpckit/paths.py), and the blueprint JSON Schema beside them, where the example blueprints' `$schema`
comment (../hpckit-blueprint.schema.json) points."""

from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

ASSETS = {
    "hpckit._assets.ansible": "ansible",
    "hpckit._assets.sbatch_templates": "sbatch_templates",
    "hpckit._assets.blueprints": "blueprints",
}
SCHEMA = "hpckit-blueprint.schema.json"


class BuildWithSchema(build_py):
    def run(self) -> None:
        super().run()
        # An editable build maps the asset packages to the source folders, so nothing has created
        # build_lib/hpckit/_assets yet; a regular wheel build has.
        target = Path(self.build_lib, "hpckit", "_assets", SCHEMA)
        target.parent.mkdir(parents=True, exist_ok=True)
        self.copy_file(SCHEMA, str(target))


setup(
    cmdclass={"build_py": BuildWithSchema},
    packages=[*find_packages(include=["hpckit", "hpckit.*"]), *ASSETS],
    package_dir=ASSETS,
    package_data={
        "hpckit": ["data/*.yaml", "data/*.json", "data/*.txt", "py.typed"],
        **{name: ["**/*", "**/.*"] for name in ASSETS},
    },
)
