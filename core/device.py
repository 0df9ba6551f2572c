"""What a device is made of: its capabilities, buffers, and the allocator, compiler and runtime
roles that plugins implement. Public methods check and explain; plugins implement the `_` ones."""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from plugrad.config import DEFAULT_ALLOC_CACHE, Config, MemoryBound
from plugrad.dtype import ALL_DTYPES, DType, dtypes
from plugrad.kernel_cache import KernelCache, package_version
from plugrad.ops import Ops


@dataclass(frozen=True)
class TensorCore:
  """A matrix multiply-accumulate the threads of a warp compute together as one instruction: D = A·B + C with A of
  `dims` (M, K), B (K, N), C and D (M, N); A and B hold `dtype_in`, C and D `dtype_acc` (NVIDIA's mma.m16n8k16:
  (16, 8, 16), float16 in, float32 out, 32 threads).

  Each thread holds part of each matrix, its fragment: `a`, `b` and `c` say which element is where, as the bits of
  the (row, column) of a fragment's element: each bit of the row and of the column, lowest first, is a bit of the
  thread's lane in the warp ("l0".."l4") or of the element's position in the thread's fragment ("e0", "e1", ...).
  A thread holds M*K/threads elements of A, K*N/threads of B and M*N/threads of C, in a vector (VECTORIZE) of that
  many lanes. The lanes of a warp are `threads` consecutive threads of launch dimension 0 (its work-group size a
  multiple of `threads`).

  :param name: what the renderer knows the instruction by (the loop program's WMMA names it).
  :param pair_loads: the renderer takes a LOAD of two neighbouring elements of `dtype_in` (a vector of 2, from an even
    index of a buffer, which starts aligned): a fragment's pairs of elements that neighbour in memory are read so.
  """
  name: str
  dims: tuple[int, int, int]
  dtype_in: DType
  dtype_acc: DType
  threads: int
  a: tuple[tuple[str, ...], tuple[str, ...]]
  b: tuple[tuple[str, ...], tuple[str, ...]]
  c: tuple[tuple[str, ...], tuple[str, ...]]
  pair_loads: bool = False

  def __post_init__(self) -> None:
    m, n, k = self.dims
    for name, layout, (rows, cols) in (("a", self.a, (m, k)), ("b", self.b, (k, n)), ("c", self.c, (m, n))):
      bits = layout[0] + layout[1]
      elems = rows * cols // self.threads
      want = {f"l{i}" for i in range(self.threads.bit_length() - 1)} | {f"e{i}" for i in range(elems.bit_length() - 1)}
      if (1 << len(layout[0]), 1 << len(layout[1])) != (rows, cols) or set(bits) != want or len(bits) != len(want):
        raise ValueError(f"TensorCore {self.name}: fragment {name} of a {rows}x{cols} matrix over {self.threads} "
                         f"threads names each of {sorted(want)} once as the bits of (row, column); got {layout}")

  def elements(self, operand: str) -> int:
    """How many elements of `operand` ("a", "b" or "c") one thread holds."""
    rows, cols = (len(bits) for bits in getattr(self, operand))
    return (1 << (rows + cols)) // self.threads

  def wmma_arg(self) -> tuple:
    """The arg of a loop program's WMMA: (name, dims, threads, a, b, c), plain data a renderer and the reference
    device read."""
    return (self.name, self.dims, self.threads, self.a, self.b, self.c)


def fragment_positions(layout: tuple[tuple[str, ...], tuple[str, ...]], threads: int, elements: int) -> np.ndarray:
  """(row, column) of every fragment element: an int array of shape (threads, elements, 2) (`TensorCore`)."""
  lane = np.arange(threads).reshape(-1, 1)
  elem = np.arange(elements).reshape(1, -1)
  out = np.zeros((threads, elements, 2), dtype=np.int64)
  for axis, bits in enumerate(layout):
    for pos, bit in enumerate(bits):
      src = lane if bit[0] == "l" else elem
      out[..., axis] += ((src >> int(bit[1:])) & 1) << pos
  return out


@dataclass(frozen=True)
class Capabilities:
  """What a device can do; the scheduler and lowering read limits only from here.

  :param max_buffers: most buffers one kernel may bind (None: no limit).
  :param dtypes: the dtypes the device computes with.
  :param launch_dims: hardware launch dimensions (3 on GPUs); 0 for devices whose kernels loop
    over the output themselves.
  :param max_global_size: largest global size per launch dimension.
  :param max_local_size: largest work-group size per launch dimension (empty: no work-groups).
  :param max_workgroup_threads: most threads in one work-group.
  :param local_memory: bytes of work-group shared memory (0: none).
  :param max_vector_bytes: widest vector load/store the device likes.
  :param vector_registers: how many vector registers a thread has (16 on AVX2, 32 on AVX-512 and NEON):
    bounds how many vector accumulators a register tile may keep.
  :param cache_bytes: bytes of the cache a thread's tiles should stay in (a CPU core's L2), detected at run
    time; 0 when unknown (the heuristic then assumes 1 MiB).
  :param vector_ops: whether the device's renderer takes vector dtypes (`dtypes.float32.vec(8)`)
    and the ops VECTORIZE and GEP in loop programs; the lowering then vectorises the innermost
    upcast output dimension (plugrad.codegen.vectorize). False: loop programs are all scalar.
  :param masked_loads: (with vector_ops) whether the renderer takes a vector LOAD gated by a vector of bools,
    one per lane: a lane whose gate is false reads nothing, not even when its element is outside the
    buffer, and gives 0 (a masked load); and a vector STORE gated the same way, which writes no masked-off
    lane. The lowering then reads a window's edge and every other element (a stride-2 convolution) as
    vectors instead of lane-by-lane gathers, and may vectorise an output dimension that the vector width
    does not divide (56 outputs as four vectors of 16, the last 8 lanes masked).
  :param ordered_launch: (launch_dims=0) whether the launch loops nest with the highest dimension outermost and run
    in order, threads sharing out the outermost loop only (each a contiguous part of it): an iteration of an inner
    launch loop sees what the iterations before it stored. The lowering may then run a long sum's blocks as a
    launch loop inside a group of rows (the BLOCK optimization: a matmul reads each block of B once per group
    instead of once per row tile). False where the launch runs as independent threads (a GPU, the PYTHON device's
    whole-grid arrays).
  :param supports_images: whether the device has 2D images the scheduler may place tensors in.
  :param max_image2d: the largest image (height, width) in pixels.
  :param unsupported_ops: ops the device cannot run (their conformance tests skip).
  :param optional_ops: the optional ops (`OPTIONAL_OPS`) the renderer takes: on a device without one, the lowering
    writes it in ops every device has (cos from sin: three of them, where a native cos is one).
  :param tensor_cores: the warp-wide matrix multiply-accumulates the renderer takes as WMMA (`TensorCore`); the
    lowering computes a matmul of their input dtype with them (the TC optimization).
  """
  max_buffers: int | None = None
  dtypes: frozenset[DType] = frozenset(ALL_DTYPES)
  launch_dims: int = 0
  max_global_size: tuple[int, ...] = (2**31 - 1, 65535, 65535)
  max_local_size: tuple[int, ...] = ()
  max_workgroup_threads: int = 1
  local_memory: int = 0
  max_vector_bytes: int = 16
  vector_registers: int = 16
  cache_bytes: int = 0
  vector_ops: bool = False
  masked_loads: bool = False
  ordered_launch: bool = False
  supports_images: bool = False
  max_image2d: tuple[int, int] = (16384, 16384)
  unsupported_ops: frozenset[str] = frozenset()
  optional_ops: frozenset[str] = frozenset()
  tensor_cores: tuple[TensorCore, ...] = ()

  @property
  def launch_loops_in_order(self) -> bool:
    """Whether the launch is loops (launch_dims=0) that run in order (`ordered_launch`): what the BLOCK
    optimization needs."""
    return self.launch_dims == 0 and self.ordered_launch

  def __post_init__(self) -> None:
    if unknown := sorted(set(self.optional_ops) - OPTIONAL_OPS):
      raise ValueError(f"Capabilities.optional_ops names {', '.join(unknown)}, which plugrad does not know; the "
                       f"optional ops are {', '.join(sorted(OPTIONAL_OPS))}")
    if unknown := sorted(set(self.unsupported_ops) - _OP_NAMES):  # a misspelled one declared nothing
      raise ValueError(f"Capabilities.unsupported_ops names {', '.join(unknown)}, which are no ops of plugrad's IR "
                       f"(plugrad.ops.Ops: SIN, EXP2, ...)")

  def lacks(self, op: str) -> bool:
    """Whether a kernel using `op` cannot run: declared unsupported, or made of one (cos of SINs, where COS is
    not taken natively)."""
    return op in self.unsupported_ops or (op == "COS" and "COS" not in self.optional_ops and "SIN" in self.unsupported_ops)


_OP_NAMES = frozenset(o.name for o in Ops)  # what unsupported_ops may name (checked on every Capabilities made)

#: Ops a renderer may take or leave (`Capabilities.optional_ops`): a plugin written before one existed never sees it.
OPTIONAL_OPS = frozenset({"COS"})


@dataclass(frozen=True)
class ImageSpec:
  """Buffer options asking for a 2D RGBA image of `height` x `width` pixels (4 elements each)."""
  height: int
  width: int


@dataclass(frozen=True)
class DeviceDecl:
  """A device a plugin offers.

  :param name: the device name users write in DEVICE (upper case, no colon).
  :param priority: higher wins when no device is asked for.
  :param probe: returns None when the device can run here, else the reason it cannot.
  :param install_hint: what to install or do to make the device available.
  :param description: one line for `python -m plugrad devices`.
  :param count: how many devices of this name the machine has (NAME:0 .. NAME:count-1); asked only
    when the device is available.
  :param count_hint: how a user gets more of them, where that is a setting (an index past `count` is refused with
    it: "set PLUGRAD_CPU_DEVICES=N for N CPU devices").
  :param replaces: this plugin means to take over a device name another plugin (or plugrad itself)
    also declares. Without it a contested name is refused rather than silently taken over.
  """
  name: str
  priority: int
  probe: Callable[[], str | None] = lambda: None
  install_hint: str = ""
  description: str = ""
  count: Callable[[], int] = lambda: 1
  replaces: bool = False
  count_hint: str = ""


class DeviceError(RuntimeError):
  """A device is unknown, cannot start, or failed to run a kernel; the message says what to do."""


class UnsupportedError(DeviceError):
  """The work needs a dtype or op that the device declares it does not support."""


def check_supported(device: str, caps: Capabilities, dtypes_used: set[DType], ops_used: set[str] = frozenset()) -> None:
  """Raise UnsupportedError naming what `device` lacks among `dtypes_used` and `ops_used`."""
  missing = sorted(d.name for d in dtypes_used if d not in caps.dtypes)
  if missing: raise UnsupportedError(f"device {device} does not support dtype {', '.join(missing)}")
  bad_ops = sorted(o for o in ops_used if caps.lacks(o))
  if bad_ops: raise UnsupportedError(f"device {device} does not support {', '.join(bad_ops)}")


# ---------------------------------------------------------------- allocator

@dataclass
class MemoryStats:
  """Bytes an allocator holds for live buffers (in_use), and the most it ever held (peak)."""
  in_use: int = 0
  peak: int = 0
  allocations: int = 0
  cache_hits: int = 0


class Allocator:
  """Device memory. Plugins implement `_alloc`, `_free`, `_copyin`, `_copyout`; the public methods
  keep statistics and check arguments."""

  def __init__(self) -> None:
    self.stats = MemoryStats()

  def alloc(self, nbytes: int, options: Any = None) -> Any:
    if nbytes < 0: raise ValueError(f"cannot allocate {nbytes} bytes")
    raw = self._alloc(max(nbytes, 1), options)
    self.stats.in_use += nbytes
    self.stats.allocations += 1
    self.stats.peak = max(self.stats.peak, self.stats.in_use)
    return raw

  def free(self, raw: Any, nbytes: int, options: Any = None) -> None:
    self.stats.in_use -= nbytes
    self._free(raw, max(nbytes, 1), options)

  def configure(self, config: Config) -> None:
    """Apply the session's settings (the registry calls it once, when it gets the device's allocator)."""

  def copyin(self, raw: Any, src: memoryview) -> None: self._copyin(raw, src)
  def copyout(self, dest: memoryview, raw: Any) -> None: self._copyout(dest, raw)

  def as_host(self, raw: Any, nbytes: int) -> memoryview | None:
    """The first `nbytes` of a block as host memory that can be read in place (devices whose memory
    the host sees), or None; transfers then read it without an extra copy."""
    return self._as_host(raw, nbytes)

  def _as_host(self, raw: Any, nbytes: int) -> memoryview | None: return None

  def from_host(self, mem: np.ndarray) -> Any | None:
    """A block that is the host memory `mem` (a flat uint8 array) itself, for devices whose kernels can
    use host memory in place (`Tensor.from_numpy`), or None when this device cannot (memory it does not
    see, or an address its kernels' alignment assumption rules out). The block is never freed into
    this allocator: its memory belongs to the array."""
    return self._from_host(mem)

  def _from_host(self, mem: np.ndarray) -> Any | None: return None

  def _alloc(self, nbytes: int, options: Any) -> Any: raise NotImplementedError(f"{type(self).__name__} must implement _alloc")
  def _free(self, raw: Any, nbytes: int, options: Any) -> None: pass
  def _copyin(self, raw: Any, src: memoryview) -> None:
    raise NotImplementedError(f"{type(self).__name__} must implement _copyin")
  def _copyout(self, dest: memoryview, raw: Any) -> None:
    raise NotImplementedError(f"{type(self).__name__} must implement _copyout")


class LRUAllocator(Allocator):
  """An allocator that keeps freed blocks by size and hands them out again, so repeated work does
  not pay for fresh device memory (and page faults) every time.

  The cache holds at most `cache_limit` bytes: a share of the device's memory (`memory_total()`,
  which plugins override with `_memory_total`) or a byte count, from PLUGRAD_ALLOC_CACHE through
  `configure` (2% of the device's memory by default). Past it, the blocks freed longest ago go back
  to the device. When an allocation fails, this cache and then every other LRUAllocator's cache in
  the process are emptied before it is retried.

  :param cache_limit: bytes, or a MemoryBound (None: the default share).
  """

  def __init__(self, cache_limit: int | MemoryBound | None = None) -> None:
    super().__init__()
    # size class -> blocks, least recently used class first; within a class the newest block is last
    self.cache: OrderedDict[tuple[int, Any], list[Any]] = OrderedDict()
    self.cached_bytes = 0
    self._total: int | None = None
    self.set_cache_limit(cache_limit)
    _LRU_ALLOCATORS.add(self)

  # ---------------------------------------------------------------- the bound

  def configure(self, config: Config) -> None:
    self.set_cache_limit(config.alloc_cache)

  def set_cache_limit(self, limit: int | MemoryBound | None) -> None:
    """Bound the cache (bytes, a MemoryBound, or None for the default) and trim it to the new bound."""
    if limit is None: limit = DEFAULT_ALLOC_CACHE
    self.bound = MemoryBound(nbytes=limit) if isinstance(limit, int) else limit
    self._limit: int | None = None
    self._trim()

  @property
  def cache_limit(self) -> int:
    """The most bytes of freed blocks kept (resolved on first use: a share needs the device's size)."""
    if self._limit is None:
      self._limit = self.bound.nbytes if self.bound.nbytes is not None else self.bound.bytes_of(self.memory_total())
    return self._limit

  def memory_total(self) -> int:
    """Bytes of memory the device has: what a share in PLUGRAD_ALLOC_CACHE is a share of."""
    if self._total is None: self._total = int(self._memory_total())
    return self._total

  def _memory_total(self) -> int:
    """The device's memory in bytes. The default is the memory this process may use on the host,
    right for host devices; a GPU plugin returns its device's memory."""
    return host_memory_bytes()

  # ---------------------------------------------------------------- alloc and free

  def alloc(self, nbytes: int, options: Any = None) -> Any:
    key = (max(nbytes, 1), options)
    if (blocks := self.cache.get(key)):
      raw = blocks.pop()  # the most recently freed block: its pages are the likeliest to be warm
      if not blocks: del self.cache[key]
      self.cached_bytes -= key[0]
      self.stats.cache_hits += 1
      self.stats.in_use += nbytes
      self.stats.peak = max(self.stats.peak, self.stats.in_use)
      return raw
    try:
      return super().alloc(nbytes, options)
    except MemoryError:
      self.clear()  # out of memory: what this cache holds goes back first
    try:
      return super().alloc(nbytes, options)
    except MemoryError:
      for other in list(_LRU_ALLOCATORS):  # other devices' caches may hold the same (host or unified) memory
        if other is not self: other.clear()
    try:
      return super().alloc(nbytes, options)
    except MemoryError as e:
      e.add_note(f"plugrad: {self.stats.in_use} bytes are held by live buffers of this allocator; every allocator "
                 f"cache was emptied before the last try. Free tensors you no longer need, or use smaller ones.")
      raise

  def free(self, raw: Any, nbytes: int, options: Any = None) -> None:
    self.stats.in_use -= nbytes
    size = max(nbytes, 1)
    if size > self.cache_limit:
      self._free(raw, size, options)
      return
    key = (size, options)
    self.cache.setdefault(key, []).append(raw)
    self.cache.move_to_end(key)
    self.cached_bytes += size
    self._trim()

  def _trim(self) -> None:
    """Give back the least recently freed blocks until the cache is within its bound."""
    while self.cache and self.cached_bytes > self.cache_limit:  # an empty cache never asks the device its size
      key, blocks = next(iter(self.cache.items()))
      raw = blocks.pop(0)
      if not blocks: del self.cache[key]
      self.cached_bytes -= key[0]
      self._free(raw, key[0], key[1])

  def clear(self) -> None:
    """Give every cached block back to the device."""
    while self.cache:  # one block at a time: a _free that runs a garbage collection may free into the cache
      (size, options), blocks = self.cache.popitem(last=False)
      self.cached_bytes -= size * len(blocks)
      for raw in blocks: self._free(raw, size, options)


_LRU_ALLOCATORS: weakref.WeakSet[LRUAllocator] = weakref.WeakSet()


def host_memory_bytes() -> int:
  """The memory this process may use: the machine's RAM, or its container's limit when lower (cgroups);
  8 GiB where the OS cannot say."""
  try:
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
  except (AttributeError, ValueError, OSError):
    return 8 << 30
  for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
    try:
      raw = Path(limit_file).read_text().strip()
    except OSError:
      continue
    if raw.isdigit(): total = min(total, int(raw))
  return total


_buffer_uids = itertools.count()


class Buffer:
  """A device buffer of `size` elements of `dtype`. Memory is allocated on first use and returned
  to the allocator when the Buffer is garbage collected or `deallocate`d."""

  def __init__(self, device: str, size: int, dtype: DType, allocator: Allocator, options: Any = None):
    self.device, self.size, self.dtype, self.options = device, size, dtype, options
    self.uid = next(_buffer_uids)  # what a graph's BUFFER node names it by
    self.allocator = allocator
    self._raw: Any = None
    self._freed = False
    self._host_owner: np.ndarray | None = None  # the array whose memory this buffer is (from_host)

  @classmethod
  def from_host(cls, device: str, dtype: DType, allocator: Allocator, arr: np.ndarray) -> Buffer | None:
    """A buffer whose memory is the C-contiguous array `arr` (shared, not copied), or None when the
    device cannot use that memory in place (see `Allocator.from_host`)."""
    for other in _host_shared:
      if other._host_owner is not None and np.may_share_memory(arr, other._host_owner):
        raise ValueError("from_numpy cannot share this array: it overlaps an array another live tensor already shares "
                         "(two buffers over one memory would break the kernels' no-alias promise)")
    raw = allocator.from_host(arr.reshape(-1).view(np.uint8)) if arr.size else None
    if raw is None: return None
    buf = cls(device, arr.size, dtype, allocator)
    buf._raw, buf._host_owner = raw, arr
    _host_shared.add(buf)
    return buf

  @property
  def nbytes(self) -> int: return self.size * self.dtype.itemsize
  @property
  def is_allocated(self) -> bool: return self._raw is not None

  def ensure_allocated(self) -> Buffer:
    if self._raw is None: self._raw = self.allocator.alloc(self.nbytes, self.options)
    return self

  @property
  def raw(self) -> Any:
    if self._freed: raise RuntimeError(f"{self!r} was used after the memory planner freed it (a scheduler bug: please report)")
    return self.ensure_allocated()._raw

  def deallocate(self, final: bool = False) -> None:
    """Return the memory to the allocator; with `final`, any later use is an error rather than a
    silent read of fresh memory."""
    self._freed = self._freed or final
    if self._host_owner is not None: self._raw = self._host_owner = None  # the array's memory: not ours to free
    elif self._raw is not None:
      raw, self._raw = self._raw, None
      self.allocator.free(raw, self.nbytes, self.options)

  def __del__(self) -> None:
    try:
      self.deallocate()
    except Exception:  # interpreter shutdown: the device may already be gone
      pass

  def copyin(self, data: np.ndarray) -> Buffer:
    """Fill the buffer from a numpy array with exactly this buffer's bytes."""
    arr = np.ascontiguousarray(data)
    if arr.nbytes != self.nbytes: raise ValueError(f"copyin of {arr.nbytes} bytes into a buffer of {self.nbytes} bytes")
    if self.nbytes: self.allocator.copyin(self.raw, memoryview(arr.reshape(-1).view(np.uint8)))
    return self

  def host_view(self) -> np.ndarray | None:
    """The contents as a flat numpy array over the buffer's own memory (no copy), with this dtype's
    storage layout, or None on a device whose memory the host cannot address. The array keeps this
    Buffer alive, so its memory is not handed to another buffer while the array exists."""
    if not self.nbytes: return np.empty(0, dtype=self.dtype.storage_np)
    mem = self.allocator.as_host(self.raw, self.nbytes)
    if mem is None: return None
    flat = np.frombuffer(mem, dtype=np.uint8)
    return np.asarray(_Pinned(self, flat.ctypes.data, flat.flags.writeable)).view(self.dtype.storage_np)

  def numpy(self) -> np.ndarray:
    """The contents as a flat numpy array with this dtype's storage layout (bfloat16 as uint16)."""
    out = np.empty(self.size, dtype=self.dtype.storage_np)
    if self.nbytes: self.allocator.copyout(memoryview(out.view(np.uint8)), self.raw)
    return out

  def __repr__(self) -> str:
    return f"<Buffer {self.device} {self.size}x{self.dtype.name}{' allocated' if self.is_allocated else ''}>"


_host_shared: weakref.WeakSet[Buffer] = weakref.WeakSet()  # live buffers over arrays' memory (Buffer.from_host)


class _Pinned:
  """The base object of an array `Buffer.host_view` returns: numpy reads the memory's address from
  `__array_interface__`, and the array holding this object holds the Buffer."""
  __slots__ = ("buffer", "__array_interface__")

  def __init__(self, buffer: Buffer, addr: int, writeable: bool):
    self.buffer = buffer
    self.__array_interface__ = {"shape": (buffer.nbytes,), "typestr": "|u1", "data": (addr, not writeable), "version": 3}


def pinned_buffer(arr: np.ndarray) -> Buffer | None:
  """The Buffer whose memory `arr` views through `Buffer.host_view` (following numpy's bases), or None."""
  base: Any = arr
  while isinstance(base, np.ndarray): base = base.base
  return base.buffer if isinstance(base, _Pinned) else None


# ---------------------------------------------------------------- transfer

class Transfer:
  """Copies a buffer's contents to a buffer of another device. Plugins implement `_copy`; `copy` checks."""

  def copy(self, dest: Buffer, src: Buffer) -> None:
    if dest.nbytes != src.nbytes:
      raise ValueError(f"cannot copy {src.nbytes} bytes of {src!r} into {dest.nbytes} bytes of {dest!r}")
    if dest.nbytes: self._copy(dest, src)

  def _copy(self, dest: Buffer, src: Buffer) -> None:
    raise NotImplementedError(f"{type(self).__name__} must implement _copy")


class HostTransfer(Transfer):
  """plugrad's fallback: read the source in place when its memory is host-visible, else copy it out to
  the host once; then copy it into the destination."""

  def _copy(self, dest: Buffer, src: Buffer) -> None:
    view = src.allocator.as_host(src.raw, src.nbytes)
    if view is not None: dest.allocator.copyin(dest.raw, view)
    else: dest.copyin(src.numpy())


# ---------------------------------------------------------------- collective

#: The reductions a Collective combines with.
REDUCE_OPS = ("sum", "prod", "max", "min")


class Collective:
  """Collectives over a group: buffers of several devices of this process, or one buffer per process of a job
  (MPI). Plugins implement the `_` methods; the public ones check their arguments.

  :attr rank: this process's place in a group of processes (0 for devices of one process).
  :attr size: how many processes the group has (1 for devices of one process).
  """
  rank: int = 0
  size: int = 1

  def all_reduce(self, bufs: list[Buffer], op: str = "sum") -> None:
    """Replace every buffer with op(all of them), element by element, in place."""
    self._check(bufs, op)
    self._all_reduce(bufs, op)

  def all_gather(self, dest: list[Buffer], src: list[Buffer]) -> None:
    """Fill each of `dest` with every member's `src` one after another (rank or buffer order)."""
    self._check(dest + src)
    self._all_gather(dest, src)

  def broadcast(self, bufs: list[Buffer], root: int = 0) -> None:
    """Copy the buffer of member `root` into every other member's buffer."""
    self._check(bufs)
    self._broadcast(bufs, root)

  def reduce_scatter(self, dest: list[Buffer], src: list[Buffer], op: str = "sum") -> None:
    """op(all `src`), cut into consecutive pieces, piece i into `dest[i]` (into this rank's one across processes)."""
    self._check(dest + src, op)
    self._reduce_scatter(dest, src, op)

  def _check(self, bufs: list[Buffer], op: str = "sum") -> None:
    if op not in REDUCE_OPS: raise ValueError(f"collective reduction {op!r} is none of {', '.join(REDUCE_OPS)}")
    if not bufs: raise ValueError("a collective needs at least one buffer")
    if len({b.dtype for b in bufs}) > 1:
      raise ValueError(f"a collective's buffers must share one dtype, got {sorted({b.dtype.name for b in bufs})}")

  def _all_reduce(self, bufs: list[Buffer], op: str) -> None:
    raise NotImplementedError(f"{type(self).__name__} must implement _all_reduce")
  def _all_gather(self, dest: list[Buffer], src: list[Buffer]) -> None:
    raise NotImplementedError(f"{type(self).__name__} must implement _all_gather")
  def _broadcast(self, bufs: list[Buffer], root: int) -> None:
    raise NotImplementedError(f"{type(self).__name__} must implement _broadcast")
  def _reduce_scatter(self, dest: list[Buffer], src: list[Buffer], op: str) -> None:
    raise NotImplementedError(f"{type(self).__name__} must implement _reduce_scatter")


# ---------------------------------------------------------------- compiler

class CompileError(RuntimeError):
  """A kernel's source did not compile; the message holds the compiler's output and the source."""


class Compiler:
  """Source text -> binary bytes, cached under a key made of the source, `identity()`, and the
  plugrad and plugin versions (see `plugrad.kernel_cache` for when a disk entry is trusted).

  Plugins implement `_compile` and `identity` (everything besides the source that changes the
  binary: compiler version, target architecture, flags).

  :param cache_dir: the private directory for this compiler's binaries; None: no cache.
  """
  #: Whether `compile` may run on a thread of its own while the engine lowers the next kernel (True only for a
  #: compiler whose work releases the interpreter and is safe beside the plugin's other calls)
  threadsafe: bool = False

  def __init__(self, cache_dir: Path | None = None) -> None:
    self.cache_dir = cache_dir
    self._caches: dict[Path, KernelCache] = {}

  def identity(self) -> str: return type(self).__qualname__
  def _compile(self, src: str) -> bytes: raise NotImplementedError(f"{type(self).__name__} must implement _compile")

  def versions(self) -> dict[str, str]:
    """What built a binary besides its source: plugrad, the plugin's package, and `identity()`."""
    return {"plugrad": package_version("plugrad"), "plugin": package_version(type(self).__module__),
            "identity": self.identity()}

  def cache_key(self, src: str, versions: dict[str, str] | None = None) -> str:
    """The entry name of `src`: a digest of it and of `versions()`."""
    stamp = json.dumps(versions if versions is not None else self.versions(), sort_keys=True)
    return hashlib.sha256(f"{stamp}\0{src}".encode()).hexdigest()

  def cache(self) -> KernelCache | None:
    """The cache of the current `cache_dir` (opened, and its directory checked, once per directory)."""
    if self.cache_dir is None: return None
    path = Path(self.cache_dir)
    if (kc := self._caches.get(path)) is None: kc = self._caches[path] = KernelCache(path)
    return kc

  def compile(self, src: str) -> tuple[bytes, bool]:
    """The binary for `src` and whether it came from the cache."""
    if (kc := self.cache()) is None: return self._checked(src), False
    versions = self.versions()
    key = self.cache_key(src, versions)
    if (cached := kc.get(key, versions)) is not None: return cached, True
    binary = self._checked(src)
    kc.put(key, versions, binary)
    return binary, False

  def _checked(self, src: str) -> bytes:
    # a plugin's _compile returning a str or None failed later as "can't concat str to bytes"
    if not isinstance(binary := self._compile(src), (bytes, bytearray)):
      raise TypeError(f"{type(self).__name__}._compile must return bytes, it returned {type(binary).__name__}")
    return bytes(binary)

  def evict(self, src: str) -> None:
    """Drop the cached binary of `src` (one the runtime could not load), so the next compile redoes it."""
    if (kc := self.cache()) is not None: kc.discard(self.cache_key(src))


# ---------------------------------------------------------------- graph

@dataclass(frozen=True)
class GraphLaunch:
  """One launch of a captured list: a loaded program, the positions of its buffers (in PARAM order) in the
  list of raw buffers each replay passes, and its launch sizes."""
  program: Program
  buffers: tuple[int, ...]
  global_size: tuple[int, ...]
  local_size: tuple[int, ...] | None


class Graph:
  """Replays a captured list of kernel launches natively (a CUDA graph; on CPU, generated code calling
  the kernels in order), so a TinyJit replay spends no Python per kernel. Plugins implement `_prepare`."""

  def prepare(self, launches: list[GraphLaunch], nbuffers: int) -> Callable[[list[Any]], None] | None:
    """A function running every launch in order on the raw buffers it is called with (a list of `nbuffers`
    allocator objects, numbered as in the launches' `buffers`), or None when this list is not worth or not
    possible to replay natively (the engine then replays it from Python).

    The function may also have a method `start(raws)`: the same run, returning once it is under way, with a
    function that waits for it (called exactly once). The engine then does its own bookkeeping for a realize (what
    the tensors now are) while the run proceeds, and touches none of the buffers before it has called it. A device
    whose launches, copies and views of memory wait for a run still going (as a CUDA stream orders its work; the
    CPU plugin's `pool.Unfinished`) may return a function that does not wait: the realize then returns while the
    run goes on."""
    return self._prepare(launches, nbuffers) if launches else None

  def _prepare(self, launches: list[GraphLaunch], nbuffers: int) -> Callable[[list[Any]], None] | None:
    raise NotImplementedError(f"{type(self).__name__} must implement _prepare")


# ---------------------------------------------------------------- runtime

class Program:
  """A loaded kernel. Calling it launches it on raw buffers and returns the seconds it took when
  `wait` is True (None otherwise).

  A kernel with Variables (its LoopProgram's `vars`) is called with `vals`, their values in that order,
  which the kernel takes as int32 parameters after its buffers; `global_size` is then the launch's, already
  evaluated for those values. A kernel without Variables is called without `vals` (so a Program written
  before Variables existed keeps working for every other kernel)."""

  def __call__(self, *bufs: Any, global_size: tuple[int, ...], local_size: tuple[int, ...] | None,
               vals: tuple[int, ...] = (), wait: bool = False) -> float | None:
    raise NotImplementedError


class Runtime:
  """Turns a compiled binary into a launchable Program."""

  def load(self, name: str, binary: bytes) -> Program:
    raise NotImplementedError(f"{type(self).__name__} must implement load")

  def synchronize(self) -> None:
    """Wait until every launched kernel has finished."""


def default_dtypes_without(*missing: DType) -> frozenset[DType]:
  """All dtypes but `missing`, for a device's Capabilities."""
  return frozenset(d for d in ALL_DTYPES if d not in missing)


def image_spec_for(shape: tuple[int, ...], dtype: DType, caps: Capabilities) -> ImageSpec | None:
  """The rule deciding which buffers become images: a float32/float16 tensor of shape (h, w, 4)
  on a device with images, within its size limits. Anything else stays a plain buffer."""
  if not caps.supports_images or len(shape) != 3 or shape[2] != 4: return None
  if dtype not in (dtypes.float32, dtypes.float16): return None
  h, w = shape[0], shape[1]
  if not (0 < h <= caps.max_image2d[0] and 0 < w <= caps.max_image2d[1]): return None
  return ImageSpec(h, w)


__all__ = ["Capabilities", "TensorCore", "fragment_positions", "DeviceDecl", "ImageSpec", "image_spec_for",
           "UnsupportedError", "check_supported",
           "DeviceError", "Allocator", "Collective", "REDUCE_OPS",
           "LRUAllocator", "MemoryStats", "Buffer", "Compiler", "CompileError", "Program",
           "Runtime", "default_dtypes_without", "dtypes"]
