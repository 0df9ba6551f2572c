"""The CL and QCOM roles on the OpenCL device here (pocl in CI): capabilities from the device,
compiler (build log on errors, binary cache), allocator (buffers, zero sizes, reuse), runtime."""
from __future__ import annotations

import numpy as np
import pytest

from plugrad import Buffer, CompileError, Tensor, dtypes
from plugrad.config import Config

from plugrad_opencl_qcom import MAX_BUFFERS_CAP, QCOM_MAX_THREADS, buffer_limit, plugin
from plugrad_opencl_qcom.cldevice import CL, GENERIC_INFO, QCOM, open_device, qcom_any
from plugrad_opencl_qcom.compiler import CLCompiler


def test_buffer_limit_from_parameter_size():
  import dataclasses
  assert buffer_limit(dataclasses.replace(GENERIC_INFO, param_size=1024, pointer_bytes=8)) == 128
  assert buffer_limit(dataclasses.replace(GENERIC_INFO, param_size=256, pointer_bytes=8)) == 32  # embedded profile
  assert buffer_limit(dataclasses.replace(GENERIC_INFO, param_size=1 << 20, pointer_bytes=8)) == MAX_BUFFERS_CAP


def test_switch_is_read_through_the_config():
  assert not qcom_any(Config.from_env({}))
  assert qcom_any(Config.from_env({"PLUGRAD_QCOM_ANY": "1"}))
  with pytest.raises(ValueError, match="PLUGRAD_QCOM_ANY"): qcom_any(Config.from_env({"PLUGRAD_QCOM_ANY": "maybe"}))
  assert [o.env for o in plugin.plugrad_config_options()] == ["PLUGRAD_QCOM_ANY"]


def test_hooks_ignore_other_devices():
  cfg = Config.from_env({})
  for hook in ("plugrad_device_capabilities", "plugrad_renderer", "plugrad_compiler", "plugrad_allocator", "plugrad_runtime"):
    assert getattr(plugin, hook)(device="CPU", config=cfg) is None
    assert getattr(plugin, hook)(device="CLX:1", config=cfg) is None


@pytest.mark.usefixtures("needs_cl")
def test_capabilities_come_from_the_device():
  cfg = Config.from_env({})
  dev = open_device(CL, cfg).device
  caps = plugin.plugrad_device_capabilities(device=CL, config=cfg)
  assert caps.launch_dims == 3
  assert caps.max_local_size == tuple(dev.max_work_item_sizes[:3])
  assert caps.max_workgroup_threads == dev.max_work_group_size
  assert caps.local_memory == dev.local_mem_size
  assert caps.max_buffers == min(dev.max_parameter_size // (dev.address_bits // 8), MAX_BUFFERS_CAP)
  assert (dtypes.float64 in caps.dtypes) == ("cl_khr_fp64" in dev.extensions)
  assert not caps.supports_images  # CL keeps plain buffers; QCOM uses images


@pytest.mark.usefixtures("needs_images")
def test_qcom_capabilities_are_adreno_tuned():
  caps = plugin.plugrad_device_capabilities(device=QCOM, config=Config.from_env({"PLUGRAD_QCOM_ANY": "1"}))
  assert caps.supports_images and caps.max_workgroup_threads <= QCOM_MAX_THREADS


@pytest.mark.usefixtures("needs_cl")
def test_compile_error_has_build_log_and_source(tmp_path):
  comp = CLCompiler(tmp_path, open_device(CL, Config.from_env({})))
  with pytest.raises(CompileError) as e: comp.compile("__kernel void broken(__global float* a) { a[0] = undefined_name; }")
  assert "undefined_name" in str(e.value) and "--- source ---" in str(e.value) and "__kernel void broken" in str(e.value)


@pytest.mark.usefixtures("needs_cl")
def test_binaries_are_cached_by_source_and_device(tmp_path):
  cldev = open_device(CL, Config.from_env({}))
  comp = CLCompiler(tmp_path, cldev)
  src = "__kernel void k(__global float* a) { a[get_global_id(0)] *= 2.0f; }"
  binary, cached = comp.compile(src)
  assert not cached and binary
  again, cached = CLCompiler(tmp_path, cldev).compile(src)
  assert cached and again == binary
  assert cldev.info.name in comp.identity() and cldev.info.driver in comp.identity()
  # the cached binary loads and runs
  from plugrad_opencl_qcom.runtime import CLRuntime
  alloc = plugin.plugrad_allocator(device=CL, config=Config.from_env({}))
  buf = Buffer(CL, 4, dtypes.float32, alloc).copyin(np.arange(4, dtype=np.float32))
  seconds = CLRuntime(cldev).load("k", again)(buf.raw, global_size=(4,), local_size=(2,), wait=True)
  assert isinstance(seconds, float) and seconds >= 0
  np.testing.assert_array_equal(buf.numpy(), np.arange(4, dtype=np.float32) * 2)


@pytest.mark.usefixtures("needs_cl")
def test_load_failure_says_what_helps(tmp_path):
  from plugrad import DeviceError
  from plugrad_opencl_qcom.runtime import CLRuntime
  cldev = open_device(CL, Config.from_env({}))
  binary, _ = CLCompiler(tmp_path, cldev).compile("__kernel void k(__global float* a) { a[0] = 1.0f; }")
  with pytest.raises(DeviceError) as e: CLRuntime(cldev).load("not_in_the_binary", binary)
  msg = str(e.value)
  assert "not_in_the_binary" in msg and "DEBUG=4" in msg and "will not help" in msg
  assert "clear the" not in msg.lower()  # clearing the cache never changes what the driver builds


@pytest.mark.usefixtures("needs_cl")
@pytest.mark.parametrize("kind", [CL, QCOM])
def test_allocator_buffers(kind, request):
  cfg = Config.from_env({"PLUGRAD_QCOM_ANY": "1"})
  if kind == QCOM: request.getfixturevalue("needs_images")
  alloc = plugin.plugrad_allocator(device=kind, config=cfg)
  for n in (0, 1, 3, 1000):
    data = np.arange(n, dtype=np.float32)
    buf = Buffer(kind, n, dtypes.float32, alloc).copyin(data)
    np.testing.assert_array_equal(buf.numpy(), data)
    buf.deallocate()
  again = Buffer(kind, 1000, dtypes.float32, alloc).ensure_allocated()
  assert alloc.stats.cache_hits >= 1
  again.deallocate()


@pytest.mark.usefixtures("needs_cl")
def test_ops_on_cl_match_numpy(cl_registry):
  a = np.random.default_rng(0).uniform(-2, 2, (5, 37)).astype(np.float32)
  out = (Tensor(a, device=CL).exp() * 2).sum(1)
  np.testing.assert_allclose(out.numpy(), (np.exp(a) * 2).sum(1), rtol=1e-5)
  h = a.astype(np.float16)
  np.testing.assert_array_equal((Tensor(h, device=CL) * 3 + 1).numpy(), h * np.float16(3) + np.float16(1))


@pytest.mark.usefixtures("needs_cl")
def test_integer_abs_of_the_minimum_on_cl(cl_registry):
  # |min| wraps to min (numpy's, torch's) and a remainder after it keeps min's sign: pocl's compiler took abs()'s result
  # cast back for non-negative and made `abs(x) % -3` an unsigned remainder (INT64_MIN gave -1 instead of -2)
  for dt in (np.int8, np.int16, np.int32, np.int64):
    info = np.iinfo(dt)
    a = np.array([info.min, info.min + 1, -7, -1, 0, 7, info.max], dt)
    x = Tensor(a, device=CL)
    for k in (-3, 2, 5):
      np.testing.assert_array_equal((x.abs() % k).numpy(), np.abs(a) % k, err_msg=f"{dt.__name__} % {k}")
      np.testing.assert_array_equal((x.abs() // k).numpy(), np.abs(a) // k, err_msg=f"{dt.__name__} // {k}")


@pytest.mark.usefixtures("needs_cl")
def test_multi_output_kernel_on_cl(cl_registry):
  """Sibling reductions are one kernel writing three buffers: three non-const __global params, one const input."""
  from plugrad.engine import render_for
  a = np.random.default_rng(1).standard_normal((5, 333)).astype(np.float32)
  x = Tensor(a, device=CL).realize()
  outs = [x.sum(1), x.max(1), (x * x).sum(1)]
  (item,) = outs[0].schedule(*outs[1:])
  _, src = render_for(cl_registry.device(CL), item.ast)
  signature = src[src.index("__kernel"):src.index("{")]
  assert signature.count("const") == 1 and signature.count("__global") == 4, signature
  Tensor.realize(*outs)
  for o, e in zip(outs, [a.sum(1), a.max(1), (a * a).sum(1)]):
    np.testing.assert_allclose(o.numpy(), e, rtol=1e-5, atol=1e-4)


def test_symbolic_shapes_launch_with_the_variables_value(cl_registry):
  # one kernel per graph for every value: its int parameter and the global size it gives come at launch
  from plugrad import Variable
  v = Variable("n", 1, 37)
  a = np.random.default_rng(1).uniform(-2, 2, (37, 5)).astype(np.float32)
  t = Tensor(a, device=CL).realize()
  for k in (1, 9, 37):
    x = t[:v.bind(k)]
    np.testing.assert_allclose((x * 2).numpy(), a[:k] * 2, rtol=1e-6)
    np.testing.assert_allclose((x.T @ x).numpy(), a[:k].T @ a[:k], rtol=1e-4, atol=1e-5)


@pytest.mark.usefixtures("needs_cl")
def test_missing_device_index_says_how_many():
  with pytest.raises(RuntimeError, match="only"): open_device("CL:99", Config.from_env({}))


@pytest.mark.usefixtures("needs_images")
def test_conformance_suite_on_qcom_with_the_switch():
  """The op, graph and device-contract tests on QCOM (PLUGRAD_QCOM_ANY=1 on pocl): the CI's run of
  the QCOM code paths. CL runs them in the main test run, where it is an available device. The user's
  kernel cache serves it as it serves every other run (QCOM kernels are keyed apart from CL's)."""
  import os
  import subprocess
  import sys
  env = {**os.environ, "PLUGRAD_QCOM_ANY": "1"}
  env.pop("DEVICE", None)
  res = subprocess.run([sys.executable, "-m", "plugrad", "conformance", "QCOM", "-q", "-p", "no:warnings"], env=env,
                       capture_output=True, text=True, timeout=600)
  assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-2000:]
