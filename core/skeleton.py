"""`python -m plugrad new-plugin NAME --dir PATH`: write an installable device-plugin folder.

The skeleton is the template files in `plugrad/templates/plugin` (package data): file names and
contents carry `{NAME}`, `{pkg}`, `{dist}`, `{Cls}` and `{contract}`, filled in with `str.format`, and
`.tmpl` is dropped from each name. It renders C with the core's C-style renderer and keeps buffers in
host memory, so it installs and renders at once; the compiler and runtime carry TODOs where a device's
own toolchain and launch code go. `examples/c_device` is this skeleton with those TODOs filled in.
"""
from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from plugrad.hookspecs import CONTRACT_VERSION

TEMPLATE = "templates/plugin"


def new_plugin(name: str, directory: Path) -> list[Path]:
  """Write the skeleton of a plugin for device `name` into `directory`; returns the files written."""
  if not re.fullmatch(r"[A-Z][A-Z0-9_]*", name.upper()):
    raise ValueError(f"a device name starts with a letter, then letters, digits and _: {name!r}")
  NAME = name.upper()
  low = NAME.lower()
  fields = {"NAME": NAME, "dist": f"plugrad-{low.replace('_', '-')}", "pkg": f"plugrad_{low}",
            "Cls": "".join(p.capitalize() for p in low.split("_")), "contract": CONTRACT_VERSION}
  directory = Path(directory)
  if directory.exists() and any(directory.iterdir()): raise FileExistsError(f"{directory} exists and is not empty")
  written = []
  for rel, template in template_files().items():
    path = directory / rel.format(**fields)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(template.format(**fields))
    written.append(path)
  return written


def template_files() -> dict[str, str]:
  """The skeleton's files: relative path (with placeholders, `.tmpl` dropped) -> template text."""
  out: dict[str, str] = {}
  def walk(node, prefix: str) -> None:
    for child in sorted(node.iterdir(), key=lambda c: c.name):
      if child.is_dir(): walk(child, f"{prefix}{child.name}/")
      elif child.name.endswith(".tmpl"): out[prefix + child.name.removesuffix(".tmpl")] = child.read_text()
  walk(resources.files("plugrad").joinpath(TEMPLATE), "")
  return out
