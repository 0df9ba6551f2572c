"""The plugin contract: every hook a device plugin (or any other plugrad plugin) may implement.

A plugin is one object (a module or an instance) whose methods carry `@hookimpl` and whose
attribute `PLUGRAD_CONTRACT` names the contract version below it was written against. Hooks
marked *first result* stop at the first implementation that returns something other than None,
so every such hook must return None for devices it does not own; implement one with
`@hookimpl(tryfirst=True)` to take over a single role of another plugin's device.

Phases, in the order a kernel meets them:
discover -> limits -> lower -> render -> compile -> allocate -> transfer -> collective -> graph -> run -> observe.

Plugins import what they use from `plugrad.plugin` (and `plugrad`) only; `plugrad.plugin.DevicePlugin`
implements the role hooks below for the device names a plugin owns.

Contract 2 (from 1): `plugrad_buffer_limit` is gone (the limit is `Capabilities.max_buffers`, one fact in
one place); `plugrad_rewrite_rules` belongs to the lower phase; the transfer role is new; the collective phase
(`plugrad_collective`, `plugrad_process_group`) came later within contract 2: optional hooks, so plugins written
before it are unchanged.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
  from plugrad.codegen.renderer import Renderer
  from plugrad.config import Config, ConfigOption
  from plugrad.device import Allocator, Capabilities, Collective, Compiler, DeviceDecl, Graph, Runtime, Transfer
  from plugrad.uops import PatternMatcher, UOp

#: The version of this contract. A plugin built for another version is refused with a message.
CONTRACT_VERSION = 2

hookspec = pluggy.HookspecMarker("plugrad")
hookimpl = pluggy.HookimplMarker("plugrad")


# -------------------------------------------------------------------------------- discover

@hookspec
def plugrad_declare_devices(config: Config) -> list[DeviceDecl]:
  """Declare the devices this plugin provides.

  :param config: the session's configuration.
  :return: one DeviceDecl per device name (name, priority, availability probe, install hint).
  """


@hookspec
def plugrad_config_options() -> list[ConfigOption]:
  """Declare environment variables this plugin reads (shown by `python -m plugrad devices`).

  :return: the options; read their values with `config.option(opt)`.
  """


# -------------------------------------------------------------------------------- limits

@hookspec(firstresult=True)
def plugrad_device_capabilities(device: str, config: Config) -> Capabilities | None:
  """Describe what `device` can do: dtypes, launch limits, local memory, vector widths, images.

  :param device: the full device string, e.g. "CUDA:1".
  :return: the Capabilities, or None when this plugin does not own `device`.
  """


# -------------------------------------------------------------------------------- lower

@hookspec
def plugrad_rewrite_rules(device: str, config: Config) -> PatternMatcher | None:
  """Extra rewrite rules the lowering runs on every loop program for `device` (every plugin's rules
  are applied, in plugin order; a table that is not a PatternMatcher is refused naming its plugin).

  :return: a PatternMatcher, or None.
  """


# -------------------------------------------------------------------------------- render

@hookspec(firstresult=True)
def plugrad_renderer(device: str, config: Config) -> Renderer | None:
  """The renderer that turns a loop program into source text for `device`.

  :return: a Renderer, or None when this plugin does not own `device`.
  """


# -------------------------------------------------------------------------------- compile

@hookspec(firstresult=True)
def plugrad_compiler(device: str, config: Config) -> Compiler | None:
  """The compiler from rendered source to binary bytes for `device`.

  :return: a Compiler (its disk cache lives under `config.cache_dir`), or None.
  """


# -------------------------------------------------------------------------------- allocate

@hookspec(firstresult=True)
def plugrad_allocator(device: str, config: Config) -> Allocator | None:
  """The allocator of `device` memory (alloc, free, copy in and out).

  :return: an Allocator, or None when this plugin does not own `device`.
  """


# -------------------------------------------------------------------------------- transfer

@hookspec(firstresult=True)
def plugrad_transfer(src_device: str, dest_device: str, config: Config) -> Transfer | None:
  """How to copy a buffer from `src_device` to `dest_device`, when this plugin knows a better way
  than plugrad's fallback (which reads host-visible memory directly, else copies out to the host and
  in again once): a peer copy between two GPUs, a mapped buffer.

  :return: a Transfer, or None to leave the pair to other plugins and the fallback.
  """


# -------------------------------------------------------------------------------- collective

@hookspec(firstresult=True)
def plugrad_collective(devices: tuple[str, ...], config: Config) -> Collective | None:
  """Collectives (all-reduce, all-gather, broadcast, reduce-scatter) over buffers on `devices`, all of this
  process, when this plugin knows a better way than plugrad's fallback (copies through the host with the
  transfer role): NCCL among GPUs, a ring over peer copies.

  :param devices: the devices of the buffers, one per member, in member order.
  :return: a Collective, or None to leave these devices to other plugins and the fallback.
  """


@hookspec(firstresult=True)
def plugrad_process_group(config: Config) -> Collective | None:
  """The group of processes this one runs in (a job started by `mpirun -np N`), for data-parallel training:
  collectives over one buffer per process, `rank` and `size` set. An existing engine provides it (MPI through
  plugrad-mpi), never a transport of plugrad's own.

  :return: a Collective, or None when this plugin finds no job (plugrad then runs as a group of one).
  """


# -------------------------------------------------------------------------------- graph

@hookspec(firstresult=True)
def plugrad_graph(device: str, config: Config) -> Graph | None:
  """How `device` replays a captured list of launches natively (optional): TinyJit hands each capture to it
  once and calls what `Graph.prepare` returns on every replay; without one (or when it returns None) the
  engine replays the launches from Python.

  :return: a Graph, or None when this plugin does not own `device` or has no native replay.
  """


# -------------------------------------------------------------------------------- run

@hookspec(firstresult=True)
def plugrad_runtime(device: str, config: Config) -> Runtime | None:
  """The runtime that loads compiled binaries of `device` and launches them. Its Programs are called as
  `prog(*bufs, global_size=, local_size=, wait=)`, with `vals=` (int32 values after the buffers) for a kernel
  with Variables (see `plugrad.device.Program`).

  :return: a Runtime, or None when this plugin does not own `device`.
  """


# -------------------------------------------------------------------------------- observe

@hookspec
def plugrad_kernel_compiled(device: str, name: str, source: str, seconds: float, cached: bool, ast: UOp) -> None:
  """Called after a kernel's source was compiled (or found in the compile cache).

  :param device: the device string.
  :param name: the kernel's name.
  :param source: the rendered source.
  :param seconds: time spent compiling (0 when cached).
  :param cached: whether the binary came from the disk cache.
  :param ast: the kernel AST it was lowered from (device-independent).
  """


@hookspec
def plugrad_kernel_ran(device: str, name: str, seconds: float | None, flops: int, bytes_moved: int,
                       global_size: tuple[int, ...], local_size: tuple[int, ...] | None) -> None:
  """Called after a kernel ran.

  :param seconds: the kernel's run time, measured only when some observer asks for timing
    (`plugrad_wants_timing`), else None.
  :param flops: floating/integer operations the kernel performs (an estimate from the program).
  :param bytes_moved: bytes the kernel reads and writes in its buffers.
  :param global_size: the launch's global size (evaluated for the Variables' values of a symbolic kernel).
  """


@hookspec
def plugrad_copy_ran(src_device: str, dest_device: str, nbytes: int, seconds: float) -> None:
  """Called after a buffer was copied between devices."""


@hookspec
def plugrad_schedule_ran(kernels: int, copies: int, seconds: float, bytes_read: int, bytes_written: int,
                         peak_bytes: int) -> None:
  """Called after a realize ran its schedule.

  :param kernels: compute kernels launched.
  :param copies: copies between devices.
  :param seconds: wall time of the whole run.
  :param bytes_read: bytes of the input buffers each step binds, summed over the steps.
  :param bytes_written: bytes of the buffers each step writes (a multi-output kernel writes several), summed.
  :param peak_bytes: the memory planner's peak: the most bytes the buffers this run allocated held at once.
  """


@hookspec
def plugrad_wants_timing() -> bool | None:
  """Return True to have kernels synchronised and timed (as DEBUG=2 does); timing costs speed."""
