"""Kernel-sized random graphs: the conformance suite's differential fuzzer (`plugrad.testing.test_graphs`) with its
KERNELS profile, on PYTHON and CPU. The device profile keeps graphs of a few elements, which a device's semantics
need; here inputs of odd sizes up to 67 on 1-3 axes, fresh operands of any broadcastable shape and chains of up to
10 ops make the kernels the scheduler fuses and the heuristic plans (vectors, unrolls, masked loads, upcast copies,
nested reductions) meet their remainders and corner cases.

The suite replays the same 300 programs per device; PLUGRAD_FUZZ_EXAMPLES=N draws N, and `--fuzz-long` draws 3000
from a random seed (a hunt: a failure prints the drawn program)."""
import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from plugrad.testing import available_devices
from plugrad.testing.test_graphs import KERNELS, check_random_graph, device_dtypes


@pytest.mark.parametrize("dev", [d for d in ("PYTHON", "CPU") if d in available_devices()])
def test_kernel_sized_random_graphs_match_numpy(dev: str, request: pytest.FixtureRequest) -> None:
  long = request.config.getoption("fuzz_long", default=False)
  examples = int(os.environ.get("PLUGRAD_FUZZ_EXAMPLES", 3000 if long else 300))
  dts = device_dtypes(dev)

  @settings(max_examples=examples, deadline=None, derandomize=not long, database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
  @given(data=st.data())
  def check(data: st.DataObject) -> None: check_random_graph(data.draw, dev, dts, KERNELS)

  check()
