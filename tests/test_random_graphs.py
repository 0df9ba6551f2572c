"""Kernel-sized random graphs: the conformance suite's differential fuzzer (`plugrad.testing.test_graphs`) with its
KERNELS profile, on PYTHON and CPU. The device profile keeps graphs of a few elements, which a device's semantics
need; here inputs of odd sizes up to 67 on 1-3 axes, fresh operands of any broadcastable shape and chains of up to
10 ops make the kernels the scheduler fuses and the heuristic plans (vectors, unrolls, masked loads, upcast copies,
nested reductions) meet their remainders and corner cases.

The same programs also run the random plans a beam search (PLUGRAD_BEAM) may keep, on CPU and CL.

The suite replays the same programs (300 per device; 60 and 15 with random plans); PLUGRAD_FUZZ_EXAMPLES=N draws N,
and `--fuzz-long` draws 3000 from a random seed (a hunt). A failure prints hypothesis's draws: the first is the seed
every choice of the KERNELS profile comes from, so `Builder(lambda _: seed, dev, device_dtypes(dev), KERNELS).build()`
(plugrad.testing.test_graphs) builds the same program again, with the heuristic's plans (a CL failure found that way:
an integer abs before a remainder on pocl)."""
import os
import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import plugrad.engine.compile as compile_module
from plugrad.config import Config
from plugrad.device import Buffer
from plugrad.registry import Registry, set_registry
from plugrad.testing import available_devices
from plugrad.testing.test_graphs import KERNELS, check_random_graph, device_dtypes


def _fuzz(dev: str, examples: int, long: bool) -> None:
  dts = device_dtypes(dev)

  @settings(max_examples=examples, deadline=None, derandomize=not long, database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
  @given(data=st.data())
  def check(data: st.DataObject) -> None: check_random_graph(data.draw, dev, dts, KERNELS)

  check()


def _examples(request: pytest.FixtureRequest, default: int) -> tuple[int, bool]:
  long = request.config.getoption("fuzz_long", default=False)
  return int(os.environ.get("PLUGRAD_FUZZ_EXAMPLES", 3000 if long else default)), long


@pytest.mark.parametrize("dev", [d for d in ("PYTHON", "CPU") if d in available_devices()])
def test_kernel_sized_random_graphs_match_numpy(dev: str, request: pytest.FixtureRequest) -> None:
  _fuzz(dev, *_examples(request, 300))


def _poison_new_buffers(monkeypatch) -> None:
  """Fill every buffer with 0xFF bytes (NaN, -1) when its memory is allocated, so that a kernel that leaves outputs
  unwritten shows it even where the allocator hands out zeroed or lucky memory."""
  plain = Buffer.ensure_allocated

  def poisoned(self: Buffer) -> Buffer:
    fresh = self._raw is None
    plain(self)
    if fresh and self.nbytes and self._host_owner is None:
      self.allocator._copyin(self._raw, memoryview(b"\xff" * self.nbytes))
    return self
  monkeypatch.setattr(Buffer, "ensure_allocated", poisoned)


@pytest.mark.parametrize("dev,default", [("CPU", 60), ("CL", 15)])
def test_plans_the_search_may_keep_match_numpy(dev: str, default: int, request: pytest.FixtureRequest, tmp_path,
                                               monkeypatch) -> None:
  """PLUGRAD_BEAM keeps whichever plan times fastest, so every plan it can reach must compute the same values.
  Random timings make the search keep random plans of the heuristic's neighbourhood, which the programs then run on
  poisoned memory. CL (pocl) has work-groups and local memory, which the CPU's plans never use."""
  if dev not in available_devices(): pytest.skip(f"no {dev} device here (CPU: plugrad-cpu-llvm; CL: an OpenCL runtime)")
  _poison_new_buffers(monkeypatch)
  times, timed = random.Random(0), []

  def random_time(device, ast, plan) -> float:
    compile_module.render_for(device, ast, plan)  # a plan that does not apply raises OptError, as when timed
    timed.append(plan)
    return times.random()
  monkeypatch.setattr(compile_module, "_time_plan", random_time)
  prev = set_registry(Registry(Config.from_env({"PLUGRAD_BEAM": "3", "PLUGRAD_CACHE_DIR": str(tmp_path)})))
  try:
    _fuzz(dev, *_examples(request, default))
    assert len(set(timed)) > default  # the search ran, over many plans
  finally:
    set_registry(prev)
    compile_module._plan_caches.clear()
