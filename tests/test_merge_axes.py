"""Neighbouring output axes that every load reads as one merge into one launch axis before the lowering
(`lowerer.merge_axes`): which axes merge, and that merged kernels give numpy's answer on PYTHON and CPU."""
import numpy as np
import pytest

from plugrad import Tensor
from plugrad.codegen.lowerer import kernel_features, lower, merge_axes
from plugrad.device import Capabilities
from plugrad.testing import available_devices
from plugrad.uops import Ops

X = np.random.default_rng(0).standard_normal((4, 5, 6, 7)).astype(np.float32)
C = np.random.default_rng(1).standard_normal(5).astype(np.float32)

# (name, build on (x, c), numpy's answer, the launch shape once merged)
CASES = [
  ("contiguous", lambda x, c: x * 2, lambda x, c: x * 2, (840,)),
  # a per-channel value broadcast over each image: only the image's rows and columns merge
  ("per_channel", lambda x, c: x * c.reshape(1, 5, 1, 1), lambda x, c: x * c.reshape(1, 5, 1, 1), (4, 5, 42)),
  # read transposed: the innermost two stay apart, and only a run of axes from the innermost merges
  ("transposed", lambda x, c: x.permute(0, 1, 3, 2) + 1, lambda x, c: x.transpose(0, 1, 3, 2) + 1, (4, 5, 7, 6)),
  # a padded axis is gated: it stays an axis of its own
  ("padded", lambda x, c: x.pad(((0, 0), (1, 1), (0, 0), (0, 0))) * 2,
   lambda x, c: np.pad(x, ((0, 0), (1, 1), (0, 0), (0, 0))) * 2, (4, 7, 42)),
  ("reduced", lambda x, c: x.sum(axis=1), lambda x, c: x.sum(axis=1), (4, 42)),
  # an axis whose index is a value (arange) stays apart
  ("arange", lambda x, c: x + Tensor.arange(5, device=x.device).reshape(1, 5, 1, 1),
   lambda x, c: x + np.arange(5).reshape(1, 5, 1, 1), (4, 5, 42)),
  # a window read (a convolution's) keeps its image axes
  ("conv", lambda x, c: x[:, :, :4].conv2d(Tensor.ones(3, 5, 2, 2, device=x.device)),
   lambda x, c: sum(np.einsum("nchw,oc->nohw", x[:, :, i:i + 3, j:j + 6], np.ones((3, 5))) for i in range(2)
                    for j in range(2)), (4, 3, 3, 6)),
]


def _last_ast(out: Tensor):
  return [it for it in out.schedule() if not it.is_copy][-1].ast


@pytest.mark.parametrize("name,build,ref,shape", CASES, ids=[c[0] for c in CASES])
def test_which_axes_merge(name, build, ref, shape):
  ast = merge_axes(_last_ast(build(Tensor(X, device="PYTHON"), Tensor(C, device="PYTHON"))))
  assert ast.src[0].src[1].shape == shape


@pytest.mark.parametrize("on", [d for d in ("PYTHON", "CPU") if d in available_devices()])
@pytest.mark.parametrize("name,build,ref,shape", CASES, ids=[c[0] for c in CASES])
def test_merged_kernels_give_numpys_answer(on, name, build, ref, shape):
  got = build(Tensor(X, device=on), Tensor(C, device=on)).numpy()
  np.testing.assert_allclose(got, ref(X, C), rtol=1e-5, atol=1e-5)


def test_merged_indices_fold_to_plain_ones():
  # the lowering splits the merged index into the axes the graph reads and the simplifier rejoins them: no division
  # or remainder is left, and the launch is one loop of all the elements
  prog = lower(_last_ast(Tensor(X, device="PYTHON") * Tensor(C, device="PYTHON").reshape(1, 5, 1, 1) + 1),
               Capabilities())
  divisions = [u for u in prog.uops if u.op in (Ops.IDIV, Ops.MOD)]
  assert prog.global_size == (42, 5, 4) and not divisions
  assert prog.name == "E_4_5_6_7"  # named by the tensor's shape still


def test_kernel_features_see_the_merged_axes():
  avx512 = Capabilities(max_vector_bytes=64, vector_ops=True)
  k = kernel_features(_last_ast(Tensor(X, device="PYTHON").sum(axis=1)), avx512)
  assert k.dims == ((1, 42), (1, 4))


def test_kernels_with_variables_keep_their_axes():
  from plugrad import Variable
  v = Variable("n", 1, 5).bind(3)
  x = Tensor(X.reshape(4, 5, 42)[:, :, :30].copy(), device="PYTHON")
  ast = _last_ast(x[:, :v] * 2)
  assert merge_axes(ast) is ast


def test_merging_stops_once_the_innermost_loop_is_long():
  # 16 -> 256 elements: merged; a loop of 256 or more (MERGE_BELOW) is long enough as it is
  assert merge_axes(_last_ast(Tensor.empty(4, 16, 16, device="PYTHON") * 2)).src[0].src[1].shape == (4, 256)
  ast = _last_ast(Tensor.empty(4, 512, device="PYTHON") * 2)
  assert merge_axes(ast) is ast
