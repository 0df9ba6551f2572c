"""The image path on QCOM with PLUGRAD_QCOM_ANY=1 (pocl in CI): (h, w, 4) float32/float16 tensors
live in RGBA images, kernels read them with read_imagef, results match numpy."""
from __future__ import annotations

import numpy as np
import pytest

from plugrad import CONTRACT_VERSION, Buffer, Tensor, dtypes, hookimpl
from plugrad.device import ImageSpec
from plugrad.registry import Registry, set_registry
from plugrad.scheduler import buffer_of

pytestmark = pytest.mark.usefixtures("needs_images")


def _sources(out: Tensor, registry) -> list[str]:
  from plugrad.engine import compile_for
  dev = registry.device("QCOM")
  return [compile_for(dev, it.ast).source for it in out.schedule() if not it.is_copy]


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float16])
@pytest.mark.parametrize("hw", [(1, 1), (3, 5), (7, 17)])  # widths whose rows are not 64-byte multiples
def test_image_round_trip(qcom_registry, dtype, hw):
  import pyopencl as cl
  h, w = hw
  data = np.random.default_rng(h * w).uniform(-4, 4, h * w * 4).astype(dtype.np)
  buf = Buffer("QCOM", data.size, dtype, qcom_registry.device("QCOM").allocator, ImageSpec(h, w)).copyin(data)
  assert isinstance(buf.raw, cl.Image) and buf.raw.shape == (w, h)
  np.testing.assert_array_equal(buf.numpy(), data)


def test_uploaded_hw4_tensor_is_an_image(qcom_registry):
  import pyopencl as cl
  t = Tensor(np.zeros((2, 3, 4), np.float32), device="QCOM")
  t2 = Tensor(np.zeros((2, 3, 5), np.float32), device="QCOM")  # not (h, w, 4): a plain buffer
  raw = [buffer_of(n).raw for n in t.uop.toposort if n.op.name == "BUFFER"]
  raw2 = [buffer_of(n).raw for n in t2.uop.toposort if n.op.name == "BUFFER"]
  assert isinstance(raw[0], cl.Image) and not isinstance(raw2[0], cl.Image)


def conv2d_nchw(x, w):
  n, cin, h, wd = x.shape
  cout, _, kh, kw = w.shape
  out = np.zeros((n, cout, h - kh + 1, wd - kw + 1), np.float64)
  for i in range(kh):
    for j in range(kw):
      out += np.einsum("nchw,oc->nohw", x[:, :, i:i + h - kh + 1, j:j + wd - kw + 1], w[:, :, i, j])
  return out


class NoLocalMemory:
  """Takes over QCOM's capabilities (tryfirst) to turn work-group memory off: kernels without group reduces."""
  PLUGRAD_CONTRACT = CONTRACT_VERSION

  def __init__(self, caps):
    self.caps = caps

  @hookimpl(tryfirst=True)
  def plugrad_device_capabilities(self, device, config):
    import dataclasses
    return dataclasses.replace(self.caps, local_memory=0) if device.split(":")[0] == "QCOM" else None


@pytest.mark.parametrize("k", [3, 5])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("local_memory", [True, False], ids=["group_reduce", "no_local"])
def test_conv2d_on_image_activations(qcom_registry, dtype, k, local_memory):
  """Activations (h, w, 4) in an image, read by a conv2d: numpy's result, and read_imagef in the source."""
  caps = qcom_registry.device("QCOM").caps
  if not local_memory:
    # a fresh registry whose QCOM capabilities come through the override (the process-wide one is restored after)
    set_registry(reg := Registry(qcom_registry.config))
    reg.pm.register(NoLocalMemory(caps), name="no-local-memory")
    assert reg.device("QCOM").caps.local_memory == 0
    qcom_registry = reg
  rng = np.random.default_rng(k)
  h, w, cout = (6 if local_memory else 5), 7, 3  # distinct kernels: the engine caches compiled kernels by AST
  act = rng.uniform(-1, 1, (h, w, 4)).astype(dtype)
  weight = rng.uniform(-1, 1, (cout, 4, k, k)).astype(np.float32)
  x = Tensor(act, device="QCOM")
  out = x.float().permute(2, 0, 1).reshape(1, 4, h, w).conv2d(Tensor(weight, device="QCOM")).relu()
  srcs = _sources(out, qcom_registry)
  assert any("read_imagef" in s and "read_only image2d_t" in s for s in srcs), "\n".join(srcs)
  expected = np.maximum(conv2d_nchw(act.astype(np.float32).transpose(2, 0, 1)[None], weight), 0)
  np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_image_inputs_with_movement_ops(qcom_registry):
  a = np.random.default_rng(2).uniform(-2, 2, (4, 3, 4)).astype(np.float32)
  t = Tensor(a, device="QCOM")
  np.testing.assert_allclose(t.flip(1).pad(((1, 0), (0, 0), (0, 0))).sum(2).numpy(),
                             np.pad(np.flip(a, 1), ((1, 0), (0, 0), (0, 0))).sum(2), rtol=1e-6)
  np.testing.assert_allclose((t.shrink(((1, 4), None, None)) * 2).numpy(), a[1:] * 2, rtol=1e-6)


def test_assign_into_an_image_computes_then_copies(qcom_registry):
  # kernels only read images: the core computes into a plain buffer and copies it into the image
  x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
  t = Tensor(x, device="QCOM")
  sched = t.assign(t * 2 + 1).schedule()
  assert [it.is_copy for it in sched] == [False, True]
  np.testing.assert_array_equal(t.numpy(), x * 2 + 1)
  np.testing.assert_array_equal((t + 1).numpy(), x * 2 + 2)  # later kernels read the image's new contents
