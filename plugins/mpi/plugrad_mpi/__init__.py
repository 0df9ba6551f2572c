"""plugrad-mpi: the process group of a job started by `mpirun` (or `mpiexec`, `srun`), through mpi4py.

The one plugin object is `plugin`; the entry point `mpi` in the group `plugrad.plugins` names it. It implements
`plugrad_process_group`: when this process was started by an MPI launcher, plugrad's collectives across processes
(`plugrad.nn.distributed.all_reduce_`, `broadcast_`) are MPI's, over COMM_WORLD. Run alone, the plugin answers
nothing and plugrad runs as a group of one, so the same training script works with and without mpirun.

MPI moves host memory: a buffer the host can address (CPU, PYTHON) is handed to MPI in place, any other is copied
out to the host and back. Transport, process placement and hosts are MPI's business (Open MPI or MPICH); plugrad
has no transport of its own.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from plugrad.plugin import Buffer, Collective, Config, ConfigOption, DeviceError, dtypes, hookimpl

__version__ = "0.1.0"

#: PLUGRAD_MPI: "auto" (the default) joins the MPI job when an MPI launcher started this process; "1" always
#: initialises MPI (a singleton job when run alone); "0" never (plugrad runs as a group of one).
MODE = ConfigOption("PLUGRAD_MPI", "auto", "auto: join the MPI job under mpirun/mpiexec; 1: always init MPI; 0: never")
#: What MPI launchers set in the processes they start (Open MPI, PMIx, MPICH/Hydra and Slurm's PMI).
LAUNCHER_VARS = (ConfigOption("OMPI_COMM_WORLD_SIZE", "", "set by Open MPI's mpirun (read to detect a job)"),
                 ConfigOption("PMIX_RANK", "", "set by PMIx launchers (read to detect a job)"),
                 ConfigOption("PMI_SIZE", "", "set by MPICH's mpiexec and Slurm (read to detect a job)"))

_OPS = {"sum": "SUM", "prod": "PROD", "max": "MAX", "min": "MIN"}


def launched_by_mpi(config: Config) -> bool:
  """Whether this process runs under an MPI launcher, or PLUGRAD_MPI asks for MPI anyway."""
  mode = config.option(MODE).strip().lower()
  if mode in ("0", "off", "no"): return False
  if mode in ("1", "on", "yes"): return True
  if mode not in ("", "auto"): raise ValueError(f"PLUGRAD_MPI={mode!r} must be auto, 1 or 0")
  return any(config.option(v) for v in LAUNCHER_VARS)


class MPICollective(Collective):
  """Collectives over the processes of an MPI communicator, one buffer per process.

  :param comm: an mpi4py communicator (COMM_WORLD by default).
  """

  def __init__(self, comm: Any = None) -> None:
    from mpi4py import MPI  # initialises MPI: done only once a job is known to exist
    self.MPI = MPI
    self.comm = comm if comm is not None else MPI.COMM_WORLD
    self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()

  # ---------------------------------------------------------------- host memory in and out

  def _host(self, buf: Buffer, read: bool = True) -> tuple[np.ndarray, bool]:
    """The buffer as a host array, and whether that array is the buffer's memory itself. With `read` False (a
    destination MPI overwrites whole), a buffer the host cannot address is not copied out first."""
    if buf.dtype in (dtypes.float16, dtypes.bfloat16):
      raise DeviceError(f"MPI has no {buf.dtype.name} arithmetic: cast the tensors to float32 for the collective")
    if (view := buf.host_view()) is not None: return view, True
    return (buf.numpy() if read else np.empty(buf.size, buf.dtype.storage_np)), False

  def _back(self, buf: Buffer, arr: np.ndarray, in_place: bool) -> None:
    if not in_place: buf.copyin(arr)

  def _op(self, op: str) -> Any: return getattr(self.MPI, _OPS[op])

  def _one(self, bufs: list[Buffer], what: str) -> Buffer:
    if len(bufs) != 1:
      raise ValueError(f"MPI {what} takes one buffer per process (this process gave {len(bufs)}); combine the devices "
                       f"of one process first")
    return bufs[0]

  # ---------------------------------------------------------------- the collectives

  def _all_reduce(self, bufs: list[Buffer], op: str) -> None:
    buf = self._one(bufs, "all_reduce")
    arr, in_place = self._host(buf)
    self.comm.Allreduce(self.MPI.IN_PLACE, arr, op=self._op(op))
    self._back(buf, arr, in_place)

  def _all_gather(self, dest: list[Buffer], src: list[Buffer]) -> None:
    d, s = self._one(dest, "all_gather"), self._one(src, "all_gather")
    if d.size != s.size * self.size:
      raise ValueError(f"all_gather of {s.size} elements per process over {self.size} processes needs a destination of "
                       f"{s.size * self.size}, got {d.size}")
    send, _ = self._host(s)  # flat and contiguous: a buffer's view or copy
    recv, in_place = self._host(d, read=False)
    self.comm.Allgather(send, recv)
    self._back(d, recv, in_place)

  def _broadcast(self, bufs: list[Buffer], root: int) -> None:
    buf = self._one(bufs, "broadcast")
    arr, in_place = self._host(buf, read=self.rank == root)
    self.comm.Bcast(arr, root=root)
    self._back(buf, arr, in_place)

  def _reduce_scatter(self, dest: list[Buffer], src: list[Buffer], op: str) -> None:
    d, s = self._one(dest, "reduce_scatter"), self._one(src, "reduce_scatter")
    if s.size != d.size * self.size:
      raise ValueError(f"reduce_scatter over {self.size} processes needs a source of {d.size * self.size} elements "
                       f"for a destination of {d.size}, got {s.size}")
    send, _ = self._host(s)
    recv, in_place = self._host(d, read=False)
    self.comm.Reduce_scatter_block(send, recv, op=self._op(op))
    self._back(d, recv, in_place)

  def barrier(self) -> None:
    """Wait until every process got here."""
    self.comm.Barrier()


class MPIPlugin:
  """The hook implementations: the process group, and the options shown by `python -m plugrad devices`."""
  PLUGRAD_CONTRACT = 2  # the plugin contract this plugin was written against

  def __init__(self) -> None:
    self._group: MPICollective | None = None

  @hookimpl
  def plugrad_config_options(self) -> list[ConfigOption]:
    return [MODE, *LAUNCHER_VARS]

  @hookimpl
  def plugrad_process_group(self, config: Config) -> Collective | None:
    if not launched_by_mpi(config): return None
    if self._group is None:  # MPI is initialised once per process, whatever registries come and go
      try:
        self._group = MPICollective()
      except ImportError as e:
        raise DeviceError(f"this process runs under an MPI launcher but mpi4py cannot be imported ({e}): "
                          f"pip install mpi4py (with Open MPI: apt-get install openmpi-bin libopenmpi-dev)") from e
    return self._group


#: The plugin object the entry point names.
plugin = MPIPlugin()

__all__ = ["plugin", "MPIPlugin", "MPICollective", "MODE", "launched_by_mpi"]
