"""Test helpers for plugrad and for device plugins: comparing with numpy, counting kernels, and a
pytest plugin (`plugrad.testing.pytest_plugin`) that parametrises tests over devices."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from plugrad.builtins.python_device import PythonCompiler, PythonRenderer, PythonRuntime
from plugrad.codegen.lowerer import lower
from plugrad.registry import get_registry
from plugrad.scheduler import mark_done
from plugrad.spec import check_program


def available_devices() -> list[str]:
  """Every device that can run here, by priority (highest first)."""
  reg = get_registry()
  rows = [s for s in reg.all_status() if s.available and s.decl is not None]
  return [s.name for s in sorted(rows, key=lambda s: -s.decl.priority)]


def assert_close(actual: Any, expected: Any, atol: float = 1e-5, rtol: float = 1e-5) -> None:
  """Compare a Tensor (or array) with a numpy reference: shape, then values (NaNs must match)."""
  a = actual.numpy() if hasattr(actual, "numpy") and not isinstance(actual, np.ndarray) else np.asarray(actual)
  e = np.asarray(expected)
  assert a.shape == e.shape, f"shape {a.shape} != expected {e.shape}"
  if e.dtype == np.bool_ or np.issubdtype(e.dtype, np.integer): np.testing.assert_array_equal(a, e)
  else: np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), atol=atol, rtol=rtol, equal_nan=True)


def kernel_count(fn: Callable[[], Any]) -> int:
  """The number of compute kernels realizing what `fn` returns (a Tensor or a list) would run."""
  out = fn()
  ts = out if isinstance(out, (list, tuple)) else [out]
  return sum(1 for it in ts[0].schedule(*ts[1:]) if not it.is_copy)


def run_lowered(out: Any, caps: Any, **lower_options: Any) -> tuple[np.ndarray, list]:
  """Schedule the Tensor `out`, lower each kernel for `caps` (a device that need not exist here) with
  `lower_options`, check each program against the program spec, run it on the PYTHON reference
  interpreter, and return the result and the loop programs."""
  programs = []
  for item in out.schedule():
    prog = lower(item.ast, caps, **lower_options)
    check_program(prog)
    programs.append(prog)
    runner = PythonRuntime().load(prog.name, PythonCompiler().compile(PythonRenderer("PYTHON").render(prog))[0])
    global_size, local_size, vals = prog.launch_dims(item.var_vals)
    runner(*(b.raw for b in item.bufs), global_size=global_size, local_size=local_size, vals=vals)
    for k in item.kernels: mark_done(k)
  return out.numpy(), programs  # the kernels ran: realizing reads their buffers
