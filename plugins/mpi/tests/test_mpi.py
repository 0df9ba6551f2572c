"""plugrad-mpi: launch detection alone, and the collectives across processes under `mpirun -np 2`.

The collective tests need a job: under plain pytest they skip, and `test_under_mpirun` starts this file under
`mpirun -np 2 --oversubscribe` itself (loopback only) when mpirun and mpi4py are installed, as `.ci/run`'s suite does."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from plugrad import Tensor
from plugrad.config import Config
from plugrad.nn import distributed
from plugrad_mpi import launched_by_mpi

try:
  import mpi4py  # noqa: F401
  MPI4PY = True
except ImportError:
  MPI4PY = False


def test_launch_detection():
  assert not launched_by_mpi(Config.from_env({}))
  assert launched_by_mpi(Config.from_env({"OMPI_COMM_WORLD_SIZE": "2"}))
  assert launched_by_mpi(Config.from_env({"PMI_SIZE": "4"}))
  assert not launched_by_mpi(Config.from_env({"OMPI_COMM_WORLD_SIZE": "2", "PLUGRAD_MPI": "0"}))
  assert launched_by_mpi(Config.from_env({"PLUGRAD_MPI": "1"}))
  with pytest.raises(ValueError, match="PLUGRAD_MPI"):
    launched_by_mpi(Config.from_env({"PLUGRAD_MPI": "maybe"}))


def _job():
  group = distributed.world()
  if group.size < 2: pytest.skip("needs an MPI job of 2 or more processes: mpirun -np 2 python -m pytest " + __file__)
  return group


def test_all_reduce_and_average_across_processes():
  g = _job()
  a = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3) * (g.rank + 1))
  b = Tensor(np.full(4, g.rank, dtype=np.int32))
  distributed.all_reduce_([a, b])
  ranks = sum(range(1, g.size + 1))
  np.testing.assert_array_equal(a.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3) * ranks)
  np.testing.assert_array_equal(b.numpy(), np.full(4, sum(range(g.size)), dtype=np.int32))
  m = Tensor(np.array([float(g.rank)], dtype=np.float32))
  distributed.all_reduce_([m], average=True)
  assert m.item() == pytest.approx(sum(range(g.size)) / g.size)
  mx = Tensor(np.array([g.rank, -g.rank], dtype=np.float32)) * 2  # lazy: realized by the collective
  distributed.all_reduce_([mx], op="max")
  np.testing.assert_array_equal(mx.numpy(), [2 * (g.size - 1), 0])


def test_broadcast_gather_scatter_across_processes():
  g = _job()
  w = Tensor(np.full(3, 10.0 + g.rank, dtype=np.float32))
  distributed.broadcast_([w], root=g.size - 1)
  np.testing.assert_array_equal(w.numpy(), np.full(3, 10.0 + g.size - 1, dtype=np.float32))
  from plugrad.registry import get_registry
  from plugrad.device import Buffer
  from plugrad.dtype import dtypes
  dev = get_registry().device(None)
  src = Buffer(dev.name, 2, dtypes.float32, dev.allocator).copyin(np.array([g.rank, g.rank], np.float32))
  dest = Buffer(dev.name, 2 * g.size, dtypes.float32, dev.allocator)
  g.all_gather([dest], [src])
  np.testing.assert_array_equal(dest.numpy(), np.repeat(np.arange(g.size, dtype=np.float32), 2))
  whole = Buffer(dev.name, g.size, dtypes.float32, dev.allocator).copyin(np.arange(g.size, dtype=np.float32))
  mine = Buffer(dev.name, 1, dtypes.float32, dev.allocator)
  g.reduce_scatter([mine], [whole], "sum")
  assert mine.numpy()[0] == g.rank * g.size


@pytest.mark.skipif(not MPI4PY, reason="mpi4py is not installed (pip install mpi4py; apt-get install openmpi-bin)")
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed (apt-get install openmpi-bin)")
def test_under_mpirun():
  if distributed.world().size > 1: pytest.skip("already inside an MPI job")
  env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "PLUGRAD_CPU_THREADS": "1",
         "OMPI_MCA_btl_tcp_if_include": "lo", "OMPI_MCA_oob_tcp_if_include": "lo"}
  cmd = ["mpirun", "-np", "2", "--oversubscribe", sys.executable, "-m", "pytest", "-q", "-p", "no:randomly",
         "-p", "no:cacheprovider", str(Path(__file__)), "-k", "across"]
  out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
  text = out.stdout + out.stderr
  assert out.returncode == 0, text[-4000:]
  assert text.count("2 passed") == 2, text[-4000:]
