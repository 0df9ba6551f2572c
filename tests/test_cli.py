"""`python -m plugrad devices` and `python -m plugrad kernels`, as a user runs them."""
import contextlib
import io
import os
import subprocess
import sys

from plugrad import Tensor


def run(*args, env=None):
  e = {**os.environ, **(env or {})}
  return subprocess.run([sys.executable, "-m", "plugrad", *args], capture_output=True, text=True, env=e, timeout=120)


def test_devices_lists_python_with_its_plugin_and_limits():
  res = run("devices")
  assert res.returncode == 0, res.stderr
  line = next(ln for ln in res.stdout.splitlines() if " PYTHON " in ln)
  assert "plugrad" in line and "available" in line and "priority 0" in line
  assert "buffers/kernel" in res.stdout


def test_kernels_prints_each_kernel_with_a_header():
  res = run("kernels", "--device", "PYTHON", "-c", "a = Tensor.rand(8, 8); out = [(a @ a).relu(), a.sum(0)]")
  assert res.returncode == 0, res.stderr
  # Tensor.rand realizes at once: its two kernels (the counter's step, the bits) come first, marked as run
  assert res.stdout.count("// kernel ") == 4 and res.stdout.count(" (ran while the code ran)") == 2
  assert "// kernel r_8_8\n" in res.stdout and "ACCUMULATE" in res.stdout


def test_kernels_builds_the_graph_on_the_device_it_lists_for():
  # a matmul copies its right operand into panels as wide as the device's vectors: the listing shows the kernels the
  # device runs (built on PYTHON, the copy had PYTHON's 4-wide panels); a device that cannot run here says so
  from plugrad.codegen.lowerer import kernel_name
  from plugrad.registry import get_registry
  from plugrad.testing import available_devices
  code = "a = Tensor.empty(256, 1024); b = Tensor.empty(1024, 1024); out = a @ b"
  if "CPU" in available_devices():
    res = run("kernels", "--device", "CPU", "-c", code)
    assert res.returncode == 0, res.stderr
    listed = [ln[len("// kernel "):] for ln in res.stdout.splitlines() if ln.startswith("// kernel ")]
    a, b = Tensor.empty(256, 1024, device="CPU"), Tensor.empty(1024, 1024, device="CPU")
    assert listed == [kernel_name(it.ast) for it in (a @ b).schedule() if not it.is_copy]
    width = get_registry().device("CPU").caps.max_vector_bytes // 4
    assert listed[0] == f"E_{1024 // width}_1024_{width}" and "cannot run here" not in res.stdout
  if "METAL" not in available_devices():
    res = run("kernels", "--device", "METAL", "-c", code)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("// kernel ") and "the graph is built on PYTHON (METAL cannot run here)" in res.stderr


def test_kernels_lists_what_the_code_realized_at_once():
  res = run("kernels", "--device", "PYTHON", "-c", "out = Tensor.randn(64, 64)")  # out is a buffer when the code ends
  assert res.returncode == 0, res.stderr
  assert res.stdout.count("// kernel ") == 2 and res.stdout.count(" (ran while the code ran)") == 2


def test_kernels_in_process_leaves_the_default_device_as_it_was():
  # main() called from Python (tests do) built its graph on PYTHON by changing the registry's DEVICE, and the default
  # that the first tensor decides stayed PYTHON afterwards: a later CPU kernel was then compiled by the wrong device
  from plugrad.__main__ import main
  from plugrad.registry import Registry, get_registry, set_registry
  prev = set_registry(Registry(get_registry().config))
  try:
    with contextlib.redirect_stdout(io.StringIO()):
      assert main(["kernels", "--device", "PYTHON", "-c", "out = Tensor.ones(4) + 1"]) == 0
    assert get_registry().default_device() == Registry(get_registry().config).default_device()
    assert (Tensor.ones(4) + 1).device == get_registry().default_device()
  finally:
    set_registry(prev)


def test_kernels_of_a_sharded_tensor_list_each_devices_kernel():
  res = run("kernels", "--device", "PYTHON", "-c", "out = Tensor.ones(4, 4).contiguous().shard(('PYTHON:0', 'PYTHON:1'), 0) * 2")
  assert res.returncode == 0, res.stderr
  assert res.stdout.count("// kernel ") >= 2  # the shards' graphs, one per device


def test_kernels_shows_the_plan_a_beam_search_cached(tmp_path):
  # under PLUGRAD_BEAM a realize takes the searched plan from the disk cache: the listing shows that one
  from plugrad import Tensor
  from plugrad.codegen.opt import Opt, OptOps
  from plugrad.codegen.opt.search import PlanCache, plan_key
  from plugrad.registry import get_registry
  code = "out = Tensor.empty(64, 64).sum(1)"
  ast = [it for it in Tensor.empty(64, 64, device="PYTHON").sum(1).schedule() if not it.is_copy][-1].ast
  device = get_registry().device("PYTHON")
  PlanCache(tmp_path / "plans").put(plan_key(ast, device.name, device.caps), (Opt(OptOps.UPCAST, 0, 2),))
  env = {"PLUGRAD_CACHE_DIR": str(tmp_path)}
  plain = run("kernels", "--device", "PYTHON", "--opts", "-c", code, env=env)
  searched = run("kernels", "--device", "PYTHON", "--opts", "-c", code, env={**env, "PLUGRAD_BEAM": "2"})
  assert plain.returncode == 0 and searched.returncode == 0, plain.stderr + searched.stderr
  assert "(searched" not in plain.stdout
  assert "// opts [Opt(UPCAST, 0, 2)] (searched: PLUGRAD_BEAM)" in searched.stdout


def test_kernels_needs_out():
  res = run("kernels", "-c", "x = 1")
  assert res.returncode != 0 and "`out`" in res.stderr


def test_unknown_device_fails_loudly():
  res = run("kernels", "--device", "NOPE", "-c", "out = Tensor([1])")
  assert res.returncode != 0 and "unknown device 'NOPE'" in res.stderr


def test_debug_levels_print_kernels(tmp_path):
  code = "from plugrad import Tensor; a = Tensor([1.0, 2.0], device='PYTHON'); print((a * 2 + 1).sum().item())"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "DEBUG": "2"})
  assert out.returncode == 0, out.stderr
  assert out.stdout.strip() == "8.0"
  assert "realized: 1 kernels" in out.stderr
  assert "*** PYTHON" in out.stderr and "GFLOP/s" in out.stderr
  assert "ms (kernels " in out.stderr and "overhead" in out.stderr  # where a realize's time goes
  out4 = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "DEBUG": "4"})
  assert "LOAD" in out4.stderr  # the PYTHON device's rendered program


def test_errors_are_one_line_with_the_fix_and_a_nonzero_exit():
  res = run("kernels", "--device", "NOPE", "-c", "out = Tensor([1])")
  assert res.returncode == 2 and res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
  assert res.stderr.startswith("python -m plugrad kernels: error: ") and "README" in res.stderr
  res = run("conformance", "NOPE")
  assert res.returncode == 2 and "Traceback" not in res.stderr and "unknown device 'NOPE'" in res.stderr


def test_conformance_without_pytest_names_the_extra(tmp_path):
  (tmp_path / "pytest.py").write_text("raise ImportError('pytest is not installed')\n")  # shadows the real one
  res = run("conformance", "PYTHON", env={"PYTHONPATH": str(tmp_path)})
  assert res.returncode == 2 and "pip install 'plugrad[test]'" in res.stderr and "Traceback" not in res.stderr


def test_a_closed_pipe_is_quiet():
  p = subprocess.Popen([sys.executable, "-m", "plugrad", "devices"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  p.stdout.readline()
  p.stdout.close()  # like `| head -1`
  err = p.stderr.read().decode()
  assert p.wait(timeout=120) == 0 and "BrokenPipeError" not in err and "Traceback" not in err


def test_compile_confirms_each_kernel():
  res = run("kernels", "--device", "PYTHON", "--compile", "-c", "a = Tensor.rand(4); out = [a + 1, a.sum()]")
  assert res.returncode == 0, res.stderr  # Tensor.rand's two kernels and out's two
  assert res.stdout.count("// compiled for PYTHON: ") == 4 and "4 of 4 kernels compiled for PYTHON" in res.stderr


def test_new_plugin_into_a_folder_in_use_is_a_clean_error(tmp_path):
  (tmp_path / "mine.txt").write_text("kept")
  res = run("new-plugin", "FOO", "--dir", str(tmp_path))  # it ended in a FileExistsError traceback
  assert res.returncode == 2 and "exists and is not empty" in res.stderr and "Traceback" not in res.stderr
  bad = run("new-plugin", "9bad", "--dir", str(tmp_path / "x"))
  assert bad.returncode == 2 and "starts with a letter" in bad.stderr  # it said "letters, digits and _", which 9bad is
  # a name an installed device has: written, with a note that it takes the name only with replaces=True
  taken = run("new-plugin", "python", "--dir", str(tmp_path / "y"))
  assert taken.returncode == 0 and "a device PYTHON is installed already" in taken.stderr
