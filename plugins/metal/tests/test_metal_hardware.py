"""Real runs on an Apple GPU. They need macOS with Metal and pyobjc-framework-Metal, and skip
elsewhere saying which is missing (on Linux: "Metal needs macOS")."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from metal_support import CORE_TESTS, IS_MACOS, NOT_MACOS_REASON


def _why_not() -> str | None:
  if not IS_MACOS: return NOT_MACOS_REASON
  from plugrad_metal import _probe
  return _probe()


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=f"no Metal GPU here: {_why_not()}")


def _t(*shape, dtype=np.float32, seed=0):
  from plugrad import Tensor
  a = np.random.default_rng(seed).uniform(-2, 2, shape).astype(dtype)
  return a, Tensor(a, device="METAL")


def test_elementwise():
  (a, ta), (b, tb) = _t(33, 17), _t(33, 17, seed=1)
  np.testing.assert_allclose(((ta * tb + 1).exp2()).numpy(), np.exp2(a * b + 1), rtol=1e-5)


def test_group_reduce_uses_threadgroup_memory():
  a, ta = _t(1000)
  np.testing.assert_allclose(ta.sum().numpy(), a.sum(), rtol=1e-4)
  b, tb = _t(4, 300)
  np.testing.assert_allclose(tb.max(1).numpy(), b.max(1))


def test_matmul():
  (a, ta), (b, tb) = _t(64, 48), _t(48, 32, seed=1)
  np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_half():
  (a, ta), (b, tb) = _t(8, 8, dtype=np.float16), _t(8, 8, dtype=np.float16, seed=1)
  np.testing.assert_allclose((ta * tb).numpy(), a * b, rtol=1e-3)


def test_nan_propagates_through_max():
  from plugrad import Tensor
  t = Tensor(np.array([1.0, np.nan, 3.0], np.float32), device="METAL")
  assert np.isnan(t.max().numpy())


def test_gpu_timestamps():
  from plugrad import get_registry
  from plugrad.engine import compile_for
  from plugrad.tensor import _schedule
  _, ta = _t(1024)
  item, = [it for it in _schedule([ta + 1]) if not it.is_copy]
  device = get_registry().device("METAL")
  ck = compile_for(device, item.ast)
  seconds = ck.runner(*[b.raw for b in item.bufs], global_size=ck.program.global_size,
                      local_size=ck.program.local_size, wait=True)
  assert isinstance(seconds, float) and 0 < seconds < 1


def test_core_op_tests_on_metal(tmp_path):
  if not (CORE_TESTS / "test_ops.py").is_file(): pytest.skip(f"the core test suite is not at {CORE_TESTS}")
  env = {k: v for k, v in os.environ.items() if k != "DEVICE"} | {"PLUGRAD_CACHE_DIR": str(tmp_path)}
  res = subprocess.run([sys.executable, "-m", "pytest", str(CORE_TESTS / "test_ops.py"), "-q", "-p", "no:cacheprovider",
                        "--plugrad-device", "METAL"], cwd=CORE_TESTS.parent, env=env, capture_output=True, text=True, timeout=900)
  assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
