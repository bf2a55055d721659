"""Packaging detail pyproject.toml cannot express: ship the top-level ansible/ and sbatch_templates/
folders inside the package (as hpckit._assets.*) so an installed hpckit finds them (see hpckit/paths.py)."""

from setuptools import find_packages, setup

ASSETS = {"hpckit._assets.ansible": "ansible", "hpckit._assets.sbatch_templates": "sbatch_templates"}

setup(
    packages=[*find_packages(include=["hpckit", "hpckit.*"]), *ASSETS],
    package_dir=ASSETS,
    package_data={
        "hpckit": ["data/*.yaml", "data/*.json", "data/*.txt", "py.typed"],
        **{name: ["**/*", "**/.*"] for name in ASSETS},
    },
)
