"""Test helpers for plugrad and for device plugins: comparing with numpy, counting kernels, and a
pytest plugin (`plugrad.testing.pytest_plugin`) that parametrises tests over devices."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from plugrad.registry import get_registry


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
