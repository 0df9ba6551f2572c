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


def _index_dtypes(t: Tensor) -> list[str]:
  from plugrad.codegen.lowerer import _index_dtype
  return [_index_dtype(s.ast).name for s in t.schedule() if s.ast is not None]


def test_indices_are_int32_unless_an_index_can_reach_2_31():
  # what is indexed decides (buffers, axes, a reshape's flat offset, the values one output's reduction adds), not the
  # size of a broadcast intermediate: a 4096^3 matmul's 2**36 products kept its indices in int64, slow on a GPU
  h = lambda *s: Tensor.empty(*s, dtype="half")  # noqa: E731
  x, y = Tensor.empty(65536, 1), Tensor.empty(1, 65536)
  assert _index_dtypes(h(4096, 4096) @ h(4096, 4096)) == ["int32"]
  assert _index_dtypes((x * y).sum(1)) == ["int32"]
  assert _index_dtypes(Tensor.empty(2**31) + 1) == ["int64"]  # a buffer
  assert _index_dtypes((x * y).contiguous()) == ["int64"]  # its output
  assert _index_dtypes((x * y).reshape(-1)[::2**20].contiguous()) == ["int64"]  # a flat offset through the reshape
  assert _index_dtypes((x * y).sum())[0] == "int64"  # 2**32 values added for one output (its first stage)
  assert _index_dtypes(Tensor.empty(1).expand(2**31).sum())[0] == "int64"  # an axis


def test_a_reduction_over_a_broadcast_larger_than_int32_indexes_gives_numpys_answer():
  # 2**31 values (a relu keeps the sum from factoring x out), each output's 65536 and every buffer indexed in int32
  rng = np.random.default_rng(3)
  x, y = rng.standard_normal((32768, 1), dtype=np.float32), rng.standard_normal((1, 65536), dtype=np.float32)
  out = (Tensor(x) - Tensor(y)).relu().sum(1)
  assert _index_dtypes(out) == ["int32"]
  np.testing.assert_allclose(out.numpy(), [np.maximum(v - y[0], 0).sum() for v in x[:, 0]], rtol=1e-4, atol=1e-2)
