"""What a tinygrad program imports besides Tensor: the top-level names (Device, GlobalCounters, getenv, fetch) and
`plugrad.helpers` (tinygrad.helpers' names for programs: getenv, colored, trange, Timing, ...)."""
import functools
import http.server
import re
import threading

import numpy as np
import pytest

import plugrad
from plugrad import Context, Device, GlobalCounters, Tensor, TinyJit, helpers
from plugrad.registry import get_registry

#: `from tinygrad import ...` in tinygrad 0.14 (its __init__'s names, nn included)
TINYGRAD_TOP_LEVEL = "Tensor TinyJit UOp Variable dtypes GlobalCounters fetch Context getenv Device nn".split()
#: tinygrad's IR node: plugrad's IR is its own (plugrad.uops.UOp); Variable, what programs make UOps for, is here
TOP_LEVEL_NOT_OFFERED = {"UOp"}
#: the names of tinygrad.helpers that its examples and programs import
TINYGRAD_HELPERS = """getenv colored ansistrip ansilen trange tqdm Timing Profiling Context ContextVar DEBUG GlobalCounters
prod dedup argfix flatten fully_flatten all_same all_int make_tuple round_up round_down ceildiv next_power2 partition
unwrap time_to_str fetch""".split()


@pytest.mark.parametrize("name", TINYGRAD_TOP_LEVEL)
def test_tinygrads_top_level_names(name):
  assert hasattr(plugrad, name) != (name in TOP_LEVEL_NOT_OFFERED), name


@pytest.mark.parametrize("name", TINYGRAD_HELPERS)
def test_tinygrads_helpers(name):
  assert hasattr(helpers, name), f"plugrad.helpers.{name} (tinygrad.helpers) is missing"


def test_getenv_converts_to_the_defaults_type(monkeypatch):
  monkeypatch.setenv("PLUGRAD_TEST_BS", "128")
  monkeypatch.setenv("PLUGRAD_TEST_LR", "0.5")
  monkeypatch.setenv("PLUGRAD_TEST_OFF", "0")
  assert helpers.getenv("PLUGRAD_TEST_BS", 512) == 128 and helpers.getenv("PLUGRAD_TEST_LR", 0.1) == 0.5
  assert helpers.getenv("PLUGRAD_TEST_OFF", True) is False and helpers.getenv("PLUGRAD_TEST_UNSET") == 0
  assert helpers.getenv("PLUGRAD_TEST_UNSET", "x") == "x"
  with pytest.raises(ValueError, match="PLUGRAD_TEST_LR='0.5' must be a int"): helpers.getenv("PLUGRAD_TEST_LR", 1)


def test_small_helpers():
  assert helpers.prod([2, 3, 4]) == 24 and helpers.prod([]) == 1
  assert helpers.dedup([3, 1, 3, 2, 1]) == [3, 1, 2] and helpers.flatten([[1], [2, 3]]) == [1, 2, 3]
  assert helpers.argfix((1, 2)) == (1, 2) == helpers.argfix(1, 2)
  assert helpers.fully_flatten([[1, [2]], np.array([[3, 4]])]) == [1, 2, 3, 4]
  assert helpers.round_up(10, 4) == 12 and helpers.round_down(10, 4) == 8 and helpers.ceildiv(10, 4) == 3
  assert helpers.next_power2(5) == 8 and helpers.partition(range(5), lambda x: x % 2 == 0) == ([0, 2, 4], [1, 3])
  assert helpers.colored("ok", "green") == "\x1b[32mok\x1b[0m" and helpers.colored("x", "RED", background=True) == "\x1b[101mx\x1b[0m"
  assert helpers.ansilen(helpers.colored("four", "red")) == 4 and helpers.colored("x", None) == "x"
  with pytest.raises(ValueError, match="unknown colour"): helpers.colored("x", "mauve")
  assert helpers.time_to_str(0.0123).strip() == "12.30ms"


def test_timing_and_progress_bar_print_what_tinygrads_do(capsys):
  with helpers.Timing("step "): pass
  assert re.fullmatch(r"step +\d+\.\d\d ms\n", capsys.readouterr().out)
  bar = helpers.trange(3)
  assert list(bar) == [0, 1, 2]
  bar.set_description("loss 1.00")
  err = capsys.readouterr().err
  assert "3/3" in err and "100%" in err and err.endswith("\n")
  assert list(helpers.tqdm([4, 5], disable=True)) == [4, 5] and capsys.readouterr().err == ""


def test_fetch_downloads_once_into_the_cache(tmp_path, monkeypatch):
  registry = get_registry()
  monkeypatch.setattr(registry, "config", registry.config.replace(cache_dir=tmp_path / "cache"))
  served = tmp_path / "served"
  served.mkdir()
  (served / "data.bin").write_bytes(b"\x01\x02\x03")
  handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
  handler.log_message = lambda *a: None  # type: ignore[method-assign]
  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  url = f"http://127.0.0.1:{server.server_port}/data.bin"
  try:
    path = helpers.fetch(url)
  finally:
    server.shutdown()
  assert path.read_bytes() == b"\x01\x02\x03" and (tmp_path / "cache") in path.parents
  assert helpers.fetch(url) == path  # from the cache: the server is gone
  assert helpers.fetch((served / "data.bin").as_uri()) == served / "data.bin"  # a local file is its own path
  with pytest.raises(OSError, match="could not read file:"): helpers.fetch((served / "missing").as_uri())


def test_global_counters_count_every_way_kernels_run():
  a = Tensor(np.ones((64, 64), np.float32)).realize()
  seen = []
  for _ in range(4):  # a Python launch first, then the cached schedule's native run
    GlobalCounters.reset()
    (a * 2 + 1).sum(1).realize()
    seen.append((GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem))
  assert len(set(seen)) == 1 and seen[0][0] == 1 and seen[0][1] >= 3 * 64 * 64 and seen[0][2] >= (64 * 64 + 64) * 4
  step = TinyJit(lambda x: (x @ x).relu().realize())
  for i in range(4):  # captured, then replayed
    GlobalCounters.reset()
    step(a)
    assert GlobalCounters.kernel_count == 1 and GlobalCounters.global_ops >= 2 * 64 ** 3, i
  GlobalCounters.reset()
  assert (GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem) == (0, 0, 0)
  before = GlobalCounters.mem_used
  b = Tensor(np.ones(1 << 16, np.float32)).contiguous().realize() + 0
  b.realize()
  assert GlobalCounters.mem_used >= before + (1 << 18)
  with Context(DEBUG=2):  # kernels timed: their time adds up
    (a + 3).realize()
  assert GlobalCounters.time_sum_s > 0


def test_device_default_and_roles():
  registry = get_registry()
  assert Device.DEFAULT == registry.default_device() and Device.canonicalize("cpu:0") == "CPU"
  assert Device["PYTHON"] is registry.device("PYTHON")
  Device[Device.DEFAULT].synchronize()
  saved = Device.DEFAULT
  try:
    Device.DEFAULT = "PYTHON"
    assert Tensor([1.0]).device == "PYTHON"
    with pytest.raises(plugrad.DeviceError, match="unknown device 'NOPE'"): Device.DEFAULT = "NOPE"
    assert Device.DEFAULT == "PYTHON"
  finally:
    Device.DEFAULT = saved


def test_device_imports_as_from_tinygrads_device_module():
  # `from tinygrad.device import Device` is how tinygrad's examples reach it
  from plugrad import Device as top
  from plugrad.device import Device
  assert Device is top and isinstance(Device.DEFAULT, str)
