"""The lowering for devices with launch dimensions and work-group memory, executed by the PYTHON
reference interpreter (which runs any loop program, whatever device it was lowered for)."""
import numpy as np
import pytest

from plugrad import Tensor
from plugrad.device import Capabilities
from plugrad.testing import run_lowered
from plugrad.uops import Ops

GPU = Capabilities(launch_dims=3, max_local_size=(1024, 1024, 64), max_workgroup_threads=1024, local_memory=48 * 1024)


@pytest.mark.parametrize("shape,axis", [((8, 40), 1), ((40,), 0), ((3, 5, 70), (0, 2)), ((16, 16, 3), (0, 2)),
                                        ((300,), 0)])
@pytest.mark.parametrize("op", ["sum", "max"])
def test_group_reduce_matches_numpy(shape, axis, op):
  x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
  got, progs = run_lowered(getattr(Tensor(x, device="PYTHON"), op)(axis) * 2, GPU)
  assert any(u.op is Ops.DEFINE_LOCAL for p in progs for u in p.uops), "expected a group reduce"
  np.testing.assert_allclose(got, getattr(x, op)(axis=axis) * 2, rtol=1e-5, atol=1e-5)


def test_group_reduce_matmul_and_launch_dims():
  # x @ W.T reads both operands along the sum: a group of threads per output
  a = np.random.default_rng(1).standard_normal((6, 33)).astype(np.float32)
  b = np.random.default_rng(2).standard_normal((5, 33)).astype(np.float32)
  got, progs = run_lowered(Tensor(a, device="PYTHON") @ Tensor(b, device="PYTHON").T, GPU)
  np.testing.assert_allclose(got, a @ b.T, rtol=1e-5, atol=1e-5)
  assert progs[0].local_size is not None and len(progs[0].global_size) == 3


@pytest.mark.parametrize("op", ["sum", "max"])
def test_a_column_reduction_runs_a_thread_per_output(op):
  # neighbouring outputs read neighbouring elements: no group, whose threads would each read another row
  x = np.random.default_rng(3).standard_normal((70, 24)).astype(np.float32)
  got, progs = run_lowered(getattr(Tensor(x, device="PYTHON"), op)(0), GPU)
  assert not any(u.op is Ops.DEFINE_LOCAL for p in progs for u in p.uops)
  np.testing.assert_allclose(got, getattr(x, op)(axis=0), rtol=1e-5, atol=1e-5)


def test_many_output_dims_merge_into_three_launch_dims():
  x = np.arange(2 * 3 * 4 * 5 * 6, dtype=np.float32).reshape(2, 3, 4, 5, 6)
  got, progs = run_lowered(Tensor(x, device="PYTHON").permute(4, 3, 2, 1, 0) + 1, GPU)
  assert len(progs[0].global_size) <= 3
  np.testing.assert_array_equal(got, x.transpose(4, 3, 2, 1, 0) + 1)
