"""Imports go one way, down the pipeline: IR -> codegen -> devices -> scheduler and registry -> engine ->
tensor -> nn. A module imports only its own layer and those below it, at module level; an import inside
a function of a higher layer would be a cycle hidden from view, and fails here too."""
import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[1] / "core"

# module-name prefixes (under `plugrad.`) by layer, lowest first; every core module must match one
LAYERS = [
  ["dtype", "config", "ops"],
  ["shape"],
  ["uops"],
  ["alu", "symbolic", "kernel_cache", "hookspecs", "device"],
  ["codegen", "spec"],
  ["plugin", "builtins", "multi"],
  ["scheduler", "registry"],
  ["engine", "helpers"],
  ["gradient", "tensor"],
  ["nn", "testing", "skeleton", "__main__", ""],  # "": the package itself (`import plugrad`)
]


def layer_of(module: str) -> int:
  name = module.removeprefix("plugrad").removeprefix(".")
  for i, prefixes in enumerate(LAYERS):
    if any(name == p or name.startswith(p + ".") for p in prefixes if p) or (name == "" and "" in prefixes): return i
  raise AssertionError(f"plugrad.{name} is in no layer of tests/test_import_layers.py: place it in one")


def module_name(path: Path) -> str:
  parts = path.relative_to(CORE).with_suffix("").parts
  return ".".join(("plugrad",) + (parts[:-1] if parts[-1] == "__init__" else parts))


def imports(tree: ast.Module, package: str):
  """(module imported, line, whether inside a function) for every plugrad import, TYPE_CHECKING blocks left out."""
  def walk(node, in_function):
    for child in ast.iter_child_nodes(node):
      if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test): continue
      inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
      if isinstance(child, ast.Import):
        for a in child.names:
          if a.name.split(".")[0] == "plugrad": yield a.name, child.lineno, in_function
      elif isinstance(child, ast.ImportFrom):
        mod = child.module or ""
        if child.level: mod = ".".join(package.split(".")[:len(package.split(".")) - child.level + 1] + ([mod] if mod else []))
        if mod.split(".")[0] == "plugrad":
          subs = [f"{mod}.{a.name}" for a in child.names if (CORE / Path(*f"{mod}.{a.name}".split(".")[1:])).exists()
                  or (CORE / Path(*f"{mod}.{a.name}".split(".")[1:])).with_suffix(".py").exists()]
          for m in subs or [mod]: yield m, child.lineno, in_function
      yield from walk(child, inner)
  yield from walk(tree, False)


def test_imports_go_down_the_layers():
  bad = []
  for path in sorted(CORE.rglob("*.py")):
    if "templates" in path.parts or path.name.startswith("test_") or path.name == "conftest.py": continue
    mod = module_name(path)
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    here = layer_of(mod)
    for target, line, in_function in imports(ast.parse(path.read_text()), package):
      if layer_of(target) > here:
        bad.append(f"{path.relative_to(CORE)}:{line} ({'inside a function' if in_function else 'module level'}) "
                   f"imports {target}, a higher layer")
  assert not bad, "imports against the layers:\n" + "\n".join(bad)
