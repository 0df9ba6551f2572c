"""The wheel holds every subpackage of core/ (pyproject lists them, since `plugrad` is built from a folder
of another name): a new subpackage missing from the list would install without its code."""
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_subpackage_of_core_is_in_the_wheel():
  meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
  listed = set(meta["tool"]["setuptools"]["packages"])
  found = {".".join(("plugrad",) + p.parent.relative_to(ROOT / "core").parts) for p in (ROOT / "core").rglob("__init__.py")}
  assert found == listed, f"missing from pyproject: {sorted(found - listed)}; listed but absent: {sorted(listed - found)}"
