"""benchmarks/bench_deploy.py --against: an older ansible/ swapped in must leave hpckit's own Python working."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks.bench_deploy import keep_python_assets
from hpckit.hw import fabric
from hpckit.paths import ansible_dir

# The infiniband role's filter plugin as trees before d0161fd had it: no IbFabric, IbNode or IbLink, which
# hpckit.hw.fabric reads from it as it is imported.
OLD_PLUGIN = """
def hpckit_topology_conf(text, nodes):
    return ""


class FilterModule:
    def filters(self):
        return {"hpckit_topology_conf": hpckit_topology_conf}
"""


def _imports_fabric(tree: Path) -> subprocess.CompletedProcess[str]:
    """hpckit.hw.fabric imported with its plugin loaded from ``tree`` as it would be from ansible/."""
    code = (
        "import sys; from pathlib import Path; import hpckit.paths as p; "
        f"p.asset_dir.cache_clear(); p.ansible_dir = lambda: Path({str(tree)!r}); "
        "import hpckit.hw.fabric as f; print(f.IbFabric.__name__)"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)


def test_a_tree_without_the_plugin_gets_ours(tmp_path: Path) -> None:
    assert _imports_fabric(tmp_path).returncode != 0  # what --against crashed on
    keep_python_assets(ansible_dir(), tmp_path)
    done = _imports_fabric(tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "IbFabric", done.stderr


def test_a_tree_with_an_older_plugin_gets_ours(tmp_path: Path) -> None:
    (tmp_path / fabric.PLUGIN).parent.mkdir(parents=True)
    (tmp_path / fabric.PLUGIN).write_text(OLD_PLUGIN)
    assert "IbFabric" in _imports_fabric(tmp_path).stderr  # AttributeError: ... no attribute 'IbFabric'
    keep_python_assets(ansible_dir(), tmp_path)
    assert _imports_fabric(tmp_path).returncode == 0
