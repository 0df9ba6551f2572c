"""The hand-written heuristic: optimization plans for a kernel, from its features and the device's
Capabilities. Plans come best first; the lowering takes the first one that applies (a VECTORIZE
that would only gather raises OptError, and the next plan is the scalar one).

What it decides:
- short reduce axes (at most UNROLL_REDUCE) are unrolled into the loop body;
- on a device that loops over its launch indices with vector ops, a padded convolution's kernel taps up to
  SLIDE_UNROLL wide are unrolled too, so each copy's padding gates are constants per lane (with 32 vector registers
  only the taps along the lanes: a kernel row's gate is the same in every lane);
- on a device with work-group memory, a single reduction with a small output is split across a
  work-group (GROUP) of 32 to 256 threads, each adding at least 64 values (every thread adds the
  group's partial sums after the barrier, so a larger group than the loads need makes that tail the
  cost); a long per-thread loop (its innermost one) is unrolled by 4, so each thread has four loads in flight.
  Not a column sum, whose neighbouring outputs read neighbouring elements while its sum reads strided: there a
  thread per output keeps a warp's loads side by side (the Tensor splits a long one into partial sums first);
- on a device with launch indices (a GPU), a large output computes several neighbouring outputs per
  thread: 4 for an elementwise kernel, a 4 x 8 register tile for a reduction too large to group (a
  matmul: each load of A feeds 8 multiply-adds and each load of B 4), two terms of a long sum per iteration;
- on a device that loops over its launch indices, a reduction tiles its outputs into registers:
  with vector ops, launch dim 0 becomes vectors as wide as the device's vector register (up to 16
  lanes; two of them where the registers hold 16 accumulators, as AVX-512's 32 do) and the first
  dimension the vector loads do not move with makes 8 rows of vector accumulators (a matmul's rows:
  each load of B's row feeds 8 FMAs; a convolution's output channels, the accumulators split evenly between
  vectors along the image row, up to 4 of them, and channels: 4 x 4 or 2 x 8 with AVX-512's 32 registers); where
  the device has masked loads and stores, a dim 0 the register's width does not divide still gets whole vectors
  (the last one's extra lanes masked, none wider than the dimension) when that wastes fewer lanes than the widest
  vector that divides it; without vector ops, 8 x 4 scalar copies. With 32 vector registers a matmul tile's sum of
  128 terms or more is written out 4 steps a loop iteration, where its rows reuse the loads (not under BLOCK, below).
  A matmul whose B does not stay in cache whole (half the cache) loops over B's columns outermost (OUTER) where the
  tile's panel of B fits, so the panel stays
  while the rows are swept; else, where its sum is cut into blocks each reading a block of B that fits, it runs the
  blocks inside groups of 8 row tiles (4 for a matmul of few rows: BLOCK), so each group reads B once. A
  reduction that reads contiguously along its own innermost loop and not along the
  outputs (a row sum, softmax's max and sum) is not tiled: its reduce axis becomes vector lanes
  (LANES), one vector accumulator whose lanes each add 1/width of the values, four vectors loaded and added
  together per step where the axis is long enough (UNROLL on the same axis); where the loads are reused across
  outputs (a matmul reading B along its rows: x @ W.T), a register tile of up to 4 x 4 outputs instead, or for a
  sum of at most 8 vectors two outputs per thread without lanes, left to the compiler's vectoriser;
- a scan's window (a short reduce axis sliding along dim 0, as cumsum's chunks are) gets two vectors along dim 0
  (else 8 rows) and its loop written out 8 steps an iteration;
- a convolution's row tile covering the whole image row keeps its short kernel taps as loops and writes out 8 of
  its input channels instead;
- a reduction nested in another (a convolution pooled in the same kernel) takes the outer one's innermost
  axis as lanes and several outputs per thread;
- an elementwise kernel computing a sin (whose argument's unknown bounds need a rarely taken branch, which the
  compiler's loop vectoriser does not take) gets vector lanes along dim 0;
- where vectors would only gather and the loads index dim 0 as x // c and x % c for a small c (a stride-2
  pooling's gradient), c outputs per thread along dim 0 turn both into constants in each copy.
"""
from __future__ import annotations

from plugrad.codegen.opt import KernelFeatures, Opt, OptOps
from plugrad.device import Capabilities
from plugrad.shape import prod

UNROLL_REDUCE = 4  # reduce axes this short are unrolled into the loop body
LANES_UNROLL = 4  # vectors a long LANES loop loads per step (UNROLL on the LANES axis)
TRANSCENDENTAL_LANES_FROM = 32  # vectors a reduce loop computing a transcendental needs before it takes LANES
GROUP_MIN, GROUP_MAX, GROUP_LOADS = 32, 256, 64  # work-group sizes, and the values each thread adds at least
GPU_TILE = 4, 8   # outputs per thread along launch dims 0 and 1 of a GPU reduction too large to group
GPU_THREADS = 1 << 14  # ... when this many threads remain (about what a GPU needs in flight)
# tensor-core tiles per warp along the rows and the columns (m16n8k16: a warp computes 128x32), and warps per work-group
# along them (4: 128 threads). Float16 matmul 4096 on an H200, fragments read in pairs (TensorCore.pair_loads): 8x4
# tiles in 1x4 warps 1.54 ms (89 TFLOP/s), 4x8 in 4x2 1.7-1.8 ms, 4x4 in 2x2 2.1 ms, 8x8 in 2x2 1.69 ms (15.7 before
# pairs, spilling registers)
TC_TILES = 8, 4
# ... and at most this many where the sum is a cascade (KernelFeatures.tc_cascade): each tile then holds a scalar
# accumulator per fragment element beside its fragment. ptxas (sm_90) for float16 4096 x 8192 x 4096: 8x4 tiles use
# 255 registers and spill 256 bytes, 4x4 tiles 163 registers (8x4 without a cascade: 163). Not yet timed on a GPU.
TC_TILES_CASCADE = 4, 4
TC_WARPS = 512  # ... fewer where that leaves fewer warps than this
TC_GROUP = 1, 4
GPU_TILE_UNROLL_FROM = 64  # ... whose sum of at least this many terms runs two terms per loop iteration
DEFAULT_CACHE_BYTES = 1 << 20  # a CPU core's L2, where the device does not say
# what of a matmul's B stays in a core's cache (Capabilities.cache_bytes) beside A's rows and the outputs: at most this
# share of it (_cache_order)
CACHE_FIT_SHARE = 1 / 2
OUTER_MIN_TILES = 8  # a matmul loops over B's columns outermost only with this many column tiles for threads to share
# BLOCK runs a sum's blocks inside groups of the first of BLOCK_ROWS row tiles that leaves BLOCK_MIN_GROUPS groups
BLOCK_ROWS, BLOCK_MIN_GROUPS = (8, 4), 4
MAX_DIVISOR_UPCAST = 8  # the largest divisor of dim 0's index that outputs per thread are made to cancel
MAX_PICK_GROUP = 16  # the largest group of outputs reading one group of inputs that one thread computes together
SLIDE_UNROLL = 8  # a reduce axis sliding along a tiled dim is written out up to this long (_slide_unrolls)
CHANNEL_TILE_MIN_SUM = 256  # products summed into each output, at least, for lanes along the channels (_channel_tile)
CHANNEL_UNROLL = 8  # copies of a convolution row tile's loop over input channels (_row_tile_base)
SHORT_DOT_VECTORS = 8  # the longest reduction, in vectors, a dot tile leaves to the compiler's vectoriser (_short_dot)
MAX_LANES = 16  # the widest vector a plan takes, in lanes (a 512-bit register of float32)
SHORT_ROW_MIN_LANES = 8  # the fewest lanes `_short_row_lanes` takes along a reduce loop
#: the vector registers (AVX-512's) where the convolution choices measured on them apply: only the padded taps along
#: the lanes written out (`_tap_unrolls`), lanes along the output channels (`_channel_tile`)
WIDE_REGISTER_FILE = 32
TRANSPOSE_UPCAST = 8  # outputs per thread along the dim a transposed read runs along (_transpose_tile)
TRANSPOSE_MIN_SIZE = 1 << 16  # ... in an elementwise kernel of this many outputs or more
COLUMN_VECTORS = 8  # vectors per thread along dim 0 of a reduction tiled along it alone (_tiles)
MATMUL_SUM_UNROLL = 4  # steps of a matmul tile's sum written out per loop iteration (_tiles)
MATMUL_UNROLL_MIN_SUM = 128  # ... for a sum of this many terms or more
SCAN_MAX_WINDOW, SCAN_VECTORS, SCAN_ROWS, SCAN_UNROLL = 64, 2, 8, 8  # a scan's window (_scan_tile)


def _accumulator_budget(caps: Capabilities) -> int:
  """Vector registers a register tile's accumulators may fill: 3/4 of them, the rest hold loaded operands."""
  return caps.vector_registers * 3 // 4


def vector_lanes(caps: Capabilities, itemsize: int) -> int:
  """Lanes of the device's widest vector register for elements of `itemsize` bytes, at most MAX_LANES."""
  return min(MAX_LANES, caps.max_vector_bytes // max(itemsize, 1))


def _slide_unrolls(k: KernelFeatures, tile: list[Opt], base: list[Opt]) -> list[Opt]:
  """Each reduce axis up to SLIDE_UNROLL long that slides along a dim the tile upcasts without vectors (a
  convolution's kernel rows beside a tile of image rows), written out: the output rows then share the input rows
  they read (7x7 convolution of 32x16x70x70 to 3 channels, AVX-512: 2.4 -> 1.2 ms; padded, 41 -> 4.7 ms, which
  `_tap_unrolls` now covers). Not along a vectorised dim: its copies are a vector apart, so they read different
  elements. Not beside a tile of output channels, whose loads the copies share already: there it measured from
  0.5x to 1.4x."""
  vectorised = {o.axis for o in tile if o.op is OptOps.VECTORIZE}
  upcast = {o.axis for o in tile if o.op is OptOps.UPCAST and o.amount > 1 and o.axis not in vectorised}
  unrolled = {o.axis for o in base + tile if o.op is OptOps.UNROLL}
  axes = dict.fromkeys(r for r, d in k.sliding
                       if d in upcast and r not in unrolled and k.reduce_axes[r] <= SLIDE_UNROLL)
  return [Opt(OptOps.UNROLL, r, k.reduce_axes[r]) for r in axes]


def _tap_unrolls(k: KernelFeatures, lanes_only: bool) -> list[Opt]:
  """A padded convolution's kernel taps up to SLIDE_UNROLL wide, written out: each tap's copy then knows which of
  its lanes read padding at compile time, where the loop computed each gate (5x5, 32 channels, padding 2, 128 20x20
  images: 38 -> 10 ms; 7x7 16 -> 64 channels, padding 3, 32 56x56 images: 105 -> 31 ms). `lanes_only` (a device
  that loops over its launch with vector ops and 32 vector registers): only the taps sliding along launch dim 0, the
  vector lanes; a kernel row's gate is one per image row, the same in every lane, and its loop keeps the body small
  (those two convolutions with the tiles of `_conv_tile`, AVX-512: 9.9 -> 8.4 ms and 42 -> 22 ms; with AVX2's 16
  registers, emulated on the same machine, the rows written out stayed 11-15% faster). Unpadded taps stay a
  loop: written out they measured the same, or slower (5x5 from one channel: 0.36 -> 0.62 ms)."""
  return [Opt(OptOps.UNROLL, r, k.reduce_axes[r]) for r in k.padded_taps
          if UNROLL_REDUCE < k.reduce_axes[r] <= SLIDE_UNROLL and (not lanes_only or (r, 0) in k.sliding)]


def _transpose_tile(k: KernelFeatures) -> list[Opt]:
  """An elementwise kernel that reads across launch dim 0 and along a dim d > 0 (a transpose, a relayout with the
  channels innermost): TRANSPOSE_UPCAST outputs per thread along d, so the loop over dim 0 reads that many
  neighbouring elements of each row it touches, where it read one (AVX-512: 1024x1024 transposed 1.69 -> 0.18 ms,
  x.T + y 1.77 -> 0.21 ms, 4096x4096 48.8 -> 7.0 ms; 16 per thread measured 5x slower than 8, small kernels no
  faster: a 64x64x3x3 weight 0.010 -> 0.012 ms)."""
  d = next((d for d in k.unit_dims if d > 0), None)
  if not k.lane_strided or d is None or k.out_size < TRANSPOSE_MIN_SIZE: return []
  f = _dim_factor(k, d, TRANSPOSE_UPCAST)
  return [Opt(OptOps.UPCAST, d, f)] if f > 1 else []


def _unrolls(k: KernelFeatures) -> list[Opt]:
  return [Opt(OptOps.UNROLL, i, s) for i, s in enumerate(k.reduce_axes) if s <= UNROLL_REDUCE]


def _group(k: KernelFeatures, caps: Capabilities) -> list[Opt]:
  """A work-group split of the one, non-nested reduction of a small output."""
  if caps.local_memory <= 0 or not caps.max_local_size or caps.launch_dims < 2: return []
  # one reduction, or one per output of a multi-output kernel (they share their loops: the lowering checks)
  if k.reduces == 0 or (k.reduces != 1 and k.outputs == 1) or k.nested or not k.group_dims_ok: return []
  # a column sum: neighbouring outputs read neighbouring elements, a group's threads would read a row each (sum(0)
  # of 4096x4096 on an H200: 110-116 us in a group of 16-64, whose loads touch a line per thread)
  if k.lane_contiguous and not k.reduce_contiguous: return []
  size = prod(s for s in k.reduce_axes[:len(k.reduce_axes) // k.reduces] if s > UNROLL_REDUCE)  # unrolled: no loop
  if size < 16 or k.out_size > 65536: return []
  local = caps.local_memory // (max(k.reduce_itemsize, 4) * k.reduces)  # a local buffer per reduction
  limit = min(GROUP_MAX, caps.max_workgroup_threads, caps.max_local_size[0], local)
  if limit < 2: return []
  group = 1 << (min(limit, size, max(GROUP_MIN, size // GROUP_LOADS)).bit_length() - 1)
  per_thread = size // group
  # the innermost loop, where a sum runs over several axes (the chain ((a*b+c).relu()*2).sum() of 4096x4096 runs as
  # (16, 4096) per group on an H200: 78 -> 60 us unrolled)
  axis = k.innermost[0] if k.reduces == 1 and k.innermost else 0
  unroll = k.reduces == 1 and per_thread >= 4 * GROUP_LOADS and k.reduce_axes[axis] % 4 == 0
  return [Opt(OptOps.GROUP, 0, group)] + ([Opt(OptOps.UNROLL, axis, 4)] if unroll else [])


def _dim_factor(k: KernelFeatures, d: int, target: int) -> int:
  """The largest power of two up to `target` that divides launch dimension `d` when it is one output axis (else 1)."""
  f = target
  while f > 1 and (d >= len(k.dims) or k.dims[d][0] != 1 or k.dims[d][1] % f): f //= 2
  return f


def _tensor_core_plan(k: KernelFeatures, caps: Capabilities) -> list[Opt]:
  """A matmul on the first tensor core that computes it (KernelFeatures.tensor_cores): each warp a block of
  TC_TILES tiles (fewer where the sizes do not divide, or where it would leave fewer than TC_WARPS warps), a
  work-group of up to TC_GROUP warps."""
  tc = caps.tensor_cores[k.tensor_cores[0]]
  size_m, size_n, _, batch = k.matmul
  tiles_m, tiles_n = size_m // tc.dims[0], size_n // tc.dims[1]
  um, un = TC_TILES_CASCADE if k.tc_cascade else TC_TILES
  while um > 1 and (tiles_m % um or (tiles_m // um) * (tiles_n // un) * batch < TC_WARPS): um //= 2
  while un > 1 and (tiles_n % un or (tiles_m // um) * (tiles_n // un) * batch < TC_WARPS): un //= 2
  wm, wn = TC_GROUP
  while wm > 1 and (tiles_m // um) % wm: wm //= 2
  while wn > 1 and (tiles_n // un) % wn: wn //= 2
  return [Opt(OptOps.TC, k.tensor_cores[0], 1), Opt(OptOps.UPCAST, 0, un), Opt(OptOps.UPCAST, 1, um),
          Opt(OptOps.LOCAL, 0, wn), Opt(OptOps.LOCAL, 1, wm)]


def _gpu_tiles(k: KernelFeatures, reduce: bool) -> list[Opt]:
  """Neighbouring outputs per thread on a device with launch indices: 4 along one launch dim of an elementwise
  kernel (dim 1 first: dim 0 stays one output per thread, so neighbouring threads still load neighbouring
  elements), a 4 x 8 tile of a reduction; only where enough threads remain and a single output axis divides."""
  def fits(d: int, f: int) -> bool: return _dim_factor(k, d, f) == f
  if not reduce:
    dim = next((d for d in (1, 0) if fits(d, 4)), None)
    return [Opt(OptOps.UPCAST, dim, 4)] if dim is not None and k.out_size // 4 >= GPU_THREADS else []
  if fits(0, GPU_TILE[0]) and fits(1, GPU_TILE[1]) and k.out_size // (GPU_TILE[0] * GPU_TILE[1]) >= GPU_THREADS:
    # two steps of a long sum per loop iteration (matmul 4096 float32 on an H200: 9.1 -> 7.8 ms)
    axis = k.innermost[0] if len(k.innermost) == 1 else None
    unroll = [Opt(OptOps.UNROLL, axis, 2)] if axis is not None and k.reduce_axes[axis] % 2 == 0 and \
      k.reduce_axes[axis] >= GPU_TILE_UNROLL_FROM else []
    return [Opt(OptOps.UPCAST, 0, GPU_TILE[0]), Opt(OptOps.UPCAST, 1, GPU_TILE[1])] + unroll
  return []


def _dim0_lanes(k: KernelFeatures, caps: Capabilities, width: int, masked_ok: bool = True) -> int:
  """Vector lanes along launch dim 0: the largest power of two up to `width` that divides it, or (`masked_ok`, a
  device with masked loads) a whole vector over a dim 0 it does not divide when that wastes fewer lanes (56
  outputs: four vectors of 16, 8 lanes masked, not seven of 8: conv2d 32->64 channels at 56x56, AVX-512, 207 -> 274
  GFLOP/s), no wider than the dimension (a kernel column of 3 takes one vector of 4, not of 16)."""
  f = _dim_factor(k, 0, width)
  if f < width and masked_ok and caps.masked_loads and k.dims[0][0] == 1:
    size = k.dims[0][1]
    whole = min(width, 1 << (size - 1).bit_length())
    if size / (-(-size // whole) * whole) > f / width: f = whole
  return f


def _sin_lanes(k: KernelFeatures, caps: Capabilities) -> list[Opt]:
  """An elementwise kernel computing a sin, reading along launch dim 0: vector lanes along it. A sin whose
  argument's bounds are unknown (a value from memory) takes a rarely used branch to an exact library call for far
  arguments, and a compiler's loop vectoriser takes no loop with such a branch: the kernel stayed scalar
  (2**20 float32, AVX-512: x.sin() 3.1 -> 0.13 ms with 16 lanes; torch 0.54 ms)."""
  if not (caps.vector_ops and k.computes_sin and 0 in k.unit_dims): return []
  lanes = _dim0_lanes(k, caps, vector_lanes(caps, k.itemsize))
  return [Opt(OptOps.VECTORIZE, 0, lanes)] if lanes > 1 else []


def _divided_lanes(k: KernelFeatures, caps: Capabilities) -> list[Opt]:
  """An elementwise kernel reading along launch dim 0 whose loads index it as x // c or x % c (a bitonic sort's
  step pairing each half of a block with the other; a scan's chunk offsets): vector lanes along dim 0, whose index
  math folds per lane (16g + k in blocks of 32 is block g // 2, at (g % 2)*16 + k). The compiler's loop vectoriser
  left such a loop scalar (1024x1024 sorted along rows, AVX-512: 35 -> 23 ms; each compare step 0.64 -> 0.3 ms)."""
  if not (caps.vector_ops and k.lane_divisors and 0 in k.unit_dims): return []
  lanes = _dim0_lanes(k, caps, vector_lanes(caps, k.itemsize))
  return [Opt(OptOps.VECTORIZE, 0, lanes)] if lanes > 1 else []


def _vector_copies(k: KernelFeatures, width: int, most: int) -> int:
  """Vectors of `width` lanes per thread along launch dim 0: the largest power of two up to `most` whose vectors
  divide the dim."""
  copies = 1
  while 2 * copies <= most and k.dims[0][1] % (width * copies * 2) == 0: copies *= 2
  return copies


def _tiles(k: KernelFeatures, caps: Capabilities, vector: bool, masked_ok: bool = True, channels_ok: bool = True
           ) -> list[Opt]:
  """Register tiles over the first two launch dimensions: each factor the largest power of two up to
  the target that divides a single-axis dimension, or (`masked_ok`, a device with masked loads) a whole vector
  over a dim 0 it does not divide."""
  lanes = caps.max_vector_bytes // max(k.itemsize, 1)
  width, rows = (vector_lanes(caps, k.itemsize), 8) if vector else (min(8, lanes), 4)
  if vector and (scan := _scan_tile(k, caps, width, masked_ok)): return scan
  # the rows of a vector tile: the first dimension each vector load is reused along (a convolution's output
  # channels, not its image rows, whose loads move with them), else dim 1
  row_dim = next((d for d in k.reuse_dims if k.dims[d][0] == 1 and k.dims[d][1] % 2 == 0), 1) if vector else 1
  tiled, factors = [d for d in (0, row_dim) if d < len(k.dims)], []
  for d in tiled:
    target = width if d == 0 else rows
    f = _dim0_lanes(k, caps, target, masked_ok) if vector and d == 0 else _dim_factor(k, d, target)
    if not vector and f != target: f = 1  # scalar copies: all or nothing
    factors.append(f)
  out = [Opt(OptOps.VECTORIZE if vector and d == 0 else OptOps.UPCAST, d, f) for d, f in zip(tiled, factors) if f > 1]
  if vector and factors and factors[0] > 1 and (len(factors) == 1 or factors[1] == 1) and k.dims[0][0] == 1:
    # vectors along dim 0 alone (a column sum, a matrix-vector product): several per thread, each its own
    # accumulator, so the loop over the sum reads a longer stretch of each row and its adds overlap (4096x4096
    # summed over axis 0, AVX-512: one vector 4.65 ms, 8 vectors 1.41 ms)
    if (copies := _vector_copies(k, factors[0], min(COLUMN_VECTORS, _accumulator_budget(caps)))) > 1:
      out.insert(1, Opt(OptOps.UPCAST, 0, copies))
  if vector and len(factors) > 1 and factors[0] > 1 and factors[1] > 1:
    # a 2-D tile gets more vectors along dim 0 while the accumulators fill at most 3/4 of the vector
    # registers (the rest hold loaded operands): 2 x 8 with AVX-512's 32, each broadcast feeding 2 FMAs
    budget = _accumulator_budget(caps)
    # (a matmul only: a convolution, whose rows are output channels, runs 25-40% faster with 16 rows of one vector
    # than with 8 rows of two on AVX-512: 32->64 channels at 64x64, 295 -> 407 GFLOP/s)
    copies = _vector_copies(k, factors[0], min(4, budget // factors[1])) if row_dim == 1 else 1
    if copies > 1: out.insert(1, Opt(OptOps.UPCAST, 0, copies))
    elif row_dim != 1:
      out = (_channel_tile(k, caps, row_dim) if channels_ok else []) or _conv_tile(k, caps, row_dim, factors, masked_ok)
    else:
      # a matmul's rows too narrow for a second vector: more rows fill the registers instead, each vector load
      # feeding twice the FMAs
      rows, size = factors[1], k.dims[row_dim][1]
      while 2 * rows <= budget and size % (2 * rows) == 0 and rows < 16: rows *= 2
      if rows > factors[1]: out[-1] = Opt(OptOps.UPCAST, row_dim, rows)
    if row_dim == 1 and len(k.dims) == 2 and factors[0] * copies > factors[1]:
      out += _cache_order(k, caps, factors[0] * copies, out)
    if row_dim == 1 and 1 in k.reuse_dims and len(k.reduce_axes) == 1 and \
        k.reduce_axes[0] % MATMUL_SUM_UNROLL == 0 and k.reduce_axes[0] >= MATMUL_UNROLL_MIN_SUM and \
        caps.vector_registers >= WIDE_REGISTER_FILE and not any(o.op is OptOps.BLOCK for o in out):
      # a matmul's sum written out MATMUL_SUM_UNROLL steps a loop iteration, so its loop and index arithmetic are paid
      # once per 4 x 16 FMAs (AVX-512, 2 x 8 tile, two threads: 1024^3 270-286 -> 287-305 GFLOP/s, 512^3 265-268 ->
      # 289-291, 1024x512 by 512x2048 251-253 -> 277-285, x @ W.T at 1024 262-275 -> 307-308; found by PLUGRAD_BEAM).
      # Not with BLOCK, whose sums it slowed (256x16384 by 16384x512 184-194 -> 170-182), nor for a short sum (a
      # cumsum's windows of 32: 8x50257 369-376 -> 397-414 us), nor measured with 16 vector registers; and only where
      # the rows reuse the loads (a matmul's): a one-hot sum read as a gather (an embedding's lookup) unrolled is
      # summed over the whole vocabulary again (0.2 -> 232 ms), a sort's rank counts slowed 22 -> 37 ms
      out.append(Opt(OptOps.UNROLL, 0, MATMUL_SUM_UNROLL))
  return out


def _scan_tile(k: KernelFeatures, caps: Capabilities, width: int, masked_ok: bool) -> list[Opt]:
  """A scan's window (one short reduce axis sliding along dim 0, no load reused along any other launch dim): vectors
  along dim 0, SCAN_VECTORS of them (SCAN_ROWS rows where dim 0 takes one vector), and the window written out
  SCAN_UNROLL steps a loop iteration, instead of a matmul's tile of rows, which reuses nothing here (cumsum under
  TinyJit, AVX-512, two threads: 1024x1024 655 -> 370 us, 64x4096 168 -> 88 us, 8x50257 375-387 -> 369 us)."""
  if k.reuse_dims or len(k.reduce_axes) != 1 or (0, 0) not in k.sliding or k.reduce_axes[0] > SCAN_MAX_WINDOW: return []
  lanes = _dim0_lanes(k, caps, width, masked_ok)
  if lanes <= 1: return []
  out = [Opt(OptOps.VECTORIZE, 0, lanes)]
  if (copies := _vector_copies(k, lanes, SCAN_VECTORS)) > 1: out.append(Opt(OptOps.UPCAST, 0, copies))
  elif len(k.dims) > 1 and (rows := _dim_factor(k, 1, SCAN_ROWS)) > 1: out.append(Opt(OptOps.UPCAST, 1, rows))
  if k.reduce_axes[0] % SCAN_UNROLL == 0: out.append(Opt(OptOps.UNROLL, 0, SCAN_UNROLL))
  return out


def _cache_order(k: KernelFeatures, caps: Capabilities, cols: int, tile: list[Opt]) -> list[Opt]:
  """The loop order that keeps what a matmul tile rereads of B in the core's cache, for a tile of `cols` columns
  wider than tall (so it reads more of B than of A per step) where B does not stay there whole (more than
  CACHE_FIT_SHARE of it; where it does, the rows outermost keep it: 512x512 by 512x512 1.05x numpy, 0.31-0.94x with
  the columns outermost):
  - B's columns outermost (OUTER), the rows swept inside, where a panel of B (the tile's columns over the whole sum)
    fits: the panel stays while every row reads it (float32 on the 2-core Xeon, 2 MiB of L2, 0.57-0.69x numpy with
    the rows outermost: 1024x1024 by 1024x1024 0.91-0.94x, 128 rows 0.87-0.89x, 1024x4096 by 4096x1024 1.00-1.07x;
    by the column tiles, which threads share out, so only where there are OUTER_MIN_TILES);
  - else, for a sum cut into blocks (`KernelFeatures.sum_block`) whose block of B (those rows, all columns) fits, the
    blocks run inside groups of row tiles (BLOCK), each group reading a block of B once: 256x16384 by 16384x512 0.48x
    numpy with the rows outermost, 0.56-0.61x with the columns, 0.74x in 4 groups of 8 row tiles. Groups of 8 tiles,
    or 4 where 8 would leave fewer than 4 groups (they are what threads share out): with the columns kept inside,
    by 1024x1024 of B, 128 rows measured 0.70x numpy in groups of 4, 0.64-0.71x of 2; 512 rows 0.86x in groups of
    8, 0.84x of 4, 0.71-0.77x of 2."""
  cache = (caps.cache_bytes or DEFAULT_CACHE_BYTES) * CACHE_FIT_SHARE
  size, n = prod(k.reduce_axes) * k.reduce_itemsize, k.dims[0][1]
  if size * n <= cache: return []
  if size * cols <= cache:
    return [Opt(OptOps.OUTER, 0, 1)] if n // cols >= OUTER_MIN_TILES else []
  if not caps.launch_loops_in_order or not k.sum_block or k.sum_block * n * k.reduce_itemsize > cache:
    return []
  tiles = k.dims[1][1] // prod(o.amount for o in tile if o.op is OptOps.UPCAST and o.axis == 1)
  group = next((g for g in BLOCK_ROWS if tiles % g == 0 and tiles >= g * BLOCK_MIN_GROUPS), 0)
  return [Opt(OptOps.BLOCK, 1, group)] if group else []


def _channel_tile(k: KernelFeatures, caps: Capabilities, row_dim: int) -> list[Opt]:
  """A convolution whose weight is laid out with its output channels innermost (`row_dim` in contiguous_dims, as
  Tensor.conv2d lays it out on such a device): vector lanes along the channels, each weight vector feeding one FMA
  per output along the image row and each input value one per vector, broadcast. Every lane computes, where rows
  of 6, 8 or 20 left a quarter to five eighths of vectors along the row idle. The accumulators (3/4 of the vector
  registers) go to R outputs along the row (R dividing it) times 1 or 2 vectors of channels (AVX-512, kernels
  alone, 128 images: 32 -> 32 channels 5x5, 24x24, 8.5 -> 5.5 ms, its input gradient 11.0 -> 8.4 ms; 32 -> 64 3x3,
  10x10, 1.30 -> 0.59 ms; 64 -> 64 3x3, 8x8, 1.91 -> 0.71 ms). Empty where the layout, the channel count, the row,
  the sum or the loop's operations do not suit it."""
  lanes = vector_lanes(caps, k.itemsize)
  channels, width = k.dims[row_dim][1], k.dims[0][1]
  if row_dim not in k.contiguous_dims or lanes < 2 or channels % lanes or k.dims[0][0] != 1: return []
  # rows of up to two vectors: wider ones fill their vectors already, and a channel tile's copies along them gate
  # each tap's broadcast on its own (56-wide 7x7 padded, 66-wide: 0.66-0.96x the row tile); and a sum long enough
  # for the outputs' scattered stores (16 channels apart) not to count (one input channel, 5x5: 0.83x; three, 5x5 or
  # 7x7: 0.65-0.8x)
  if width > 2 * lanes or prod(k.reduce_axes) < CHANNEL_TILE_MIN_SUM: return []
  # measured on AVX-512's 32 registers; with AVX2's 16 (emulated on the same machine) from 0.78x (a 64-channel 3x3
  # to 6x6) to 1.48x, even over beautiful_mnist's convolutions: left to the row tile there
  if caps.vector_registers < WIDE_REGISTER_FILE: return []
  # and nothing but the product in the loop: what it reads is one value broadcast to the lanes, so an operation on
  # it (a bias and ReLU fused in) runs once per value, not per vector (5x5, 32 channels: 8.8 -> 17.8 ms)
  if k.body_ops > 1: return []
  budget = _accumulator_budget(caps)
  # the most accumulators; between equal counts about 5 outputs of the row per vector of channels (8-wide: 2 vectors
  # by 8, 0.63 ms, not 4 by 4, 0.75). Not 4 vectors: they never won once the lowering put the copies along the row
  # outermost (64 -> 128 channels 3x3 at 28x28, its input gradient: 4 by 4 2.29 ms, 2 by 7 1.89; 64 channels at 6x6:
  # 4 by 6 0.655 ms, 2 by 6 0.649)
  tiles = [(vectors * r, -abs(r - 5 * vectors), r, vectors)
           for vectors in (1, 2) if channels % (lanes * vectors) == 0
           for r in range(1, width + 1) if width % r == 0 and vectors * r <= budget]
  *_, r, vectors = max(tiles, default=(0, 0, 1, 1))
  return [Opt(OptOps.VECTORIZE, row_dim, lanes)] + ([Opt(OptOps.UPCAST, row_dim, vectors)] if vectors > 1 else []) + \
    ([Opt(OptOps.UPCAST, 0, r)] if r > 1 else [])


def _conv_tile(k: KernelFeatures, caps: Capabilities, row_dim: int, factors: list[int], masked_ok: bool) -> list[Opt]:
  """A convolution's register tile: vectors along the image row (launch dim 0) times output channels (`row_dim`).
  A step loads one input vector per vector and broadcasts one weight per channel, so the accumulators (the largest
  power of two in 3/4 of the vector registers) are split as evenly as the row allows: up to 4 vectors covering it
  (a row of 20 as two vectors of 16, the second masked), by 4 to 8 channels, where an earlier lowering measured 16
  channels of one vector fastest. AVX-512, kernels alone: 128 images of 32 channels, 24x24 to 20x20 (5x5) 9.2 ->
  7.8 ms, its input gradient 12.2 -> 9.9 ms; 16 images of 32 channels at 56x56 to 64 (3x3, padded) 4.7 -> 4.1 ms."""
  lanes, size, channels = factors[0], k.dims[0][1], k.dims[row_dim][1]
  accumulators = 1 << (_accumulator_budget(caps).bit_length() - 1)
  masked = masked_ok and caps.masked_loads and k.dims[0][0] == 1

  def used(copies: int) -> float:  # the share of lanes holding outputs, 0 where the width needs masks it cannot have
    width = lanes * copies
    return 0.0 if size % width and not masked else size / (-(-size // width) * width)
  # more vectors only where they waste no more lanes than one does (a row of 66 stays vectors of 16, not 64)
  copies = max((c for c in (1, 2, 4) if c * c <= accumulators and used(c) >= used(1)), default=1)
  rows = accumulators // copies
  while rows > 1 and channels % rows: rows //= 2
  out = [Opt(OptOps.VECTORIZE, 0, lanes * copies)]
  return out + ([Opt(OptOps.UPCAST, row_dim, rows)] if rows > 1 else [])


def _row_tile_base(k: KernelFeatures, caps: Capabilities, base: list[Opt], tile: list[Opt]) -> list[Opt]:
  """The unrolls to go with a convolution's row tile (`_conv_tile`: vectors along the image row by output channels)
  whose vectors cover the whole row: short kernel taps (written out by `_unrolls`) stay loops and the input channels'
  loop is unrolled by CHANNEL_UNROLL where it divides, so each step feeds the tile from one tap of several channels.
  AVX-512, kernels alone, medians of seven in alternation, three runs: 3 -> 16 channels 3x3 at 32x32, padded, 0.14 ->
  0.07-0.08 ms; 4 -> 16 at 28x28 0.38-0.40 -> 0.14-0.15 ms; 1 -> 8 at 28x28 0.030-0.048 -> 0.021-0.033 ms; 16 -> 16
  at 64x64 0.35-0.42 -> 0.32-0.36 ms; 32 -> 64 at 56x56 (bench_cpu's conv2d) 1.00-1.16x (PLUGRAD_BEAM found it
  there); 8 -> 16 at 13x13 0.98-0.99x. Where the vectors do not cover the row the taps stay written out: their
  padding gates then move with the vector (24 -> 48 at 40x40 in vectors of 16: 0.75x as loops). `base` unchanged for
  any other tile, with no short taps to take back, or with AVX2's 16 registers (not measured there)."""
  row = next((o.amount for o in tile if o.op is OptOps.VECTORIZE and o.axis == 0), 0)
  if caps.vector_registers < WIDE_REGISTER_FILE or row < k.dims[0][1] or \
      not any(o.op is OptOps.UPCAST and o.axis not in (0, 1) for o in tile):
    return base
  taps = {r for r, _ in k.sliding}
  short = {o.axis for o in base if o.op is OptOps.UNROLL and o.axis in taps and k.reduce_axes[o.axis] <= UNROLL_REDUCE}
  if not short: return base
  kept = [o for o in base if not (o.op is OptOps.UNROLL and o.axis in short)]
  unrolled = {o.axis for o in kept if o.op is OptOps.UNROLL}
  channels = next((i for i, size in enumerate(k.reduce_axes)
                   if i not in taps and i not in unrolled and size % CHANNEL_UNROLL == 0), None)
  return kept + ([Opt(OptOps.UNROLL, channels, CHANNEL_UNROLL)] if channels is not None else [])


def _nested(k: KernelFeatures, caps: Capabilities) -> tuple[Opt, ...]:
  """A reduction inside another (a convolution summed by a global average pool): the outer one's innermost axis
  as vector lanes (its loads move along the image; the whole axis when it fits one vector) and several outputs per
  thread (channels), so each loaded vector feeds as many FMAs. A 64-channel 3x3 convolution pooled over 8x8 (AVX-512,
  one thread): 148 us with 4 lanes, 67 us with 8 lanes and the 3x3 taps unrolled."""
  if not k.innermost: return ()
  axis, size = k.innermost[-1], k.reduce_axes[k.innermost[-1]]
  if size <= UNROLL_REDUCE: return ()  # unrolled into the body (an empty one too): no loop to take lanes from
  width = vector_lanes(caps, k.reduce_itemsize)
  while width > 1 and size % width: width //= 2
  rows = _dim_factor(k, 0, 16)
  if width < 2 or rows < 2: return ()
  return (Opt(OptOps.LANES, axis, width), Opt(OptOps.UPCAST, 0, rows))


def _reuse_dim(k: KernelFeatures) -> int | None:
  """The first reuse dim that is one output axis (a matmul's rows, a convolution's output channels), if any."""
  return next((d for d in k.reuse_dims if k.dims[d][0] == 1), None)


def _dot_tile(k: KernelFeatures, caps: Capabilities) -> list[Opt]:
  """A register tile for a reduction taking vector lanes along its reduce axis whose loads are reused across
  outputs: a matmul reading B along its rows (a linear layer's x @ W.T, attention's Q @ K.T). Launch dim 0 and the
  first dim the lane loads do not move with (x's rows) get up to 4 outputs each while the accumulators, one vector
  per output, fill at most half the vector registers; each loaded vector then feeds several FMAs (x @ W.T of
  64x784 by 256x784, AVX-512: 241 -> 70 us, a 4x4 tile; 2x4 79 us)."""
  if k.reduces != 1: return []
  if (row_dim := _reuse_dim(k)) is None: return []
  budget = max(1, caps.vector_registers // 2)  # a device declaring a register or none gets no tile, not a crash
  rows = _dim_factor(k, row_dim, min(4, budget))
  cols = _dim_factor(k, 0, min(4, budget // rows))
  return [Opt(OptOps.UPCAST, d, f) for d, f in ((0, cols), (row_dim, rows)) if f > 1]


def _short_dot(k: KernelFeatures, caps: Capabilities, lanes: list[Opt]) -> list[Opt] | None:
  """For a dot tile's reduction of at most SHORT_DOT_VECTORS vectors: no lanes, two outputs per thread along the dim
  the loads are reused across, the sum left to the compiler's vectoriser. Each output's lanes are added together once
  at its end, which a short sum does not pay for (float32 on AVX-512, kernels alone, medians of seven: x @ W.T of 512
  rows by 32 -> 192 86 -> 46 us, by 64 -> 192 94 -> 65 us, by 64 -> 64 32 -> 24 us, by 128 -> 64 40 -> 36 us; 64
  rows by 48 -> 64 7.5 -> 5.1 us; attention's scores, 16x4 heads of 32 by 32, 62 -> 34 us, 8x12 heads of 32 by 64,
  92 -> 66 us; 36 shapes from 32 to 128 terms, all 1.05-1.86x). From 160 terms (10 vectors) the tile is faster
  (0.65x as this; 256 terms 0.75x). None where it does not apply, or with AVX2's 16 registers (not measured there)."""
  if caps.vector_registers < WIDE_REGISTER_FILE or (row_dim := _reuse_dim(k)) is None: return None
  width = next((o.amount for o in lanes if o.op is OptOps.LANES), 0)
  if not width or any(k.reduce_axes[o.axis] > SHORT_DOT_VECTORS * width for o in lanes if o.op is OptOps.LANES):
    return None
  rows = _dim_factor(k, row_dim, 2)
  return [Opt(OptOps.UPCAST, row_dim, rows)] if rows > 1 else []


def _short_row_lanes(k: KernelFeatures, caps: Capabilities) -> list[Opt]:
  """Vector lanes along the reduce loop for a kernel whose loads run contiguously both along it and along launch
  dim 0 when dim 0 fills at most half a vector: a convolution's weight gradient from few input channels (its
  kernel's 5 or 7 columns as dim 0, the image rows it sums over as the loop). Lanes along the columns would idle
  most of each vector; along the rows every lane adds, and a tile of all the columns by up to 4 output channels
  (the reuse dim) reuses each loaded vector (AVX-512, kernels alone: 32 images of 3 channels at 32x32 to 16 filters
  5x5, padded, 1.99 -> 0.26 ms; 8 at 70x70 to 64 filters 7x7, 5.3 -> 1.9 ms; 128 of one channel at 28x28 to 32
  filters, 0.82 -> 0.50 ms). The widest vector that divides the row, of at least 8 lanes; empty where none does."""
  width = vector_lanes(caps, k.reduce_itemsize)
  axis = k.innermost[0] if len(k.innermost) == 1 else None
  if k.reduces != 1 or axis is None or k.dims[0][0] != 1 or 2 * k.dims[0][1] > width: return []
  while width >= 2 * SHORT_ROW_MIN_LANES and k.reduce_axes[axis] % width: width //= 2
  if k.reduce_axes[axis] % width or width < SHORT_ROW_MIN_LANES: return []
  cols = k.dims[0][1]
  row_dim = _reuse_dim(k)
  most = max(1, min(4, _accumulator_budget(caps) // cols))
  rows = 1 if row_dim is None else max(f for f in range(1, most + 1) if k.dims[row_dim][1] % f == 0)
  return [Opt(OptOps.LANES, axis, width), Opt(OptOps.UPCAST, 0, cols)] + \
    ([Opt(OptOps.UPCAST, row_dim, rows)] if row_dim is not None and rows > 1 else [])


def hand_coded_optimizations(k: KernelFeatures, caps: Capabilities) -> list[tuple[Opt, ...]]:
  """Plans for the kernel, best first; the last one always applies."""
  lanes_only = caps.vector_ops and caps.launch_dims == 0 and caps.vector_registers >= WIDE_REGISTER_FILE
  base = _unrolls(k) + _tap_unrolls(k, lanes_only)
  if group := _group(k, caps): return [tuple(base + group), tuple(base)]
  if caps.launch_dims != 0 and k.tensor_cores:
    tile = _gpu_tiles(k, reduce=True)
    return [tuple(_tensor_core_plan(k, caps)), tuple(base + tile), tuple(base)]
  if caps.launch_dims != 0:
    tile = _gpu_tiles(k, reduce=k.reduces > 0)
    return [tuple(base + tile), tuple(base)] if tile else [tuple(base)]
  if k.reduces == 0:
    tiles = (_transpose_tile(k), _sin_lanes(k, caps), _divided_lanes(k, caps))
    return [tuple(base + tile) for tile in tiles if tile] + [tuple(base)]
  if caps.vector_ops and k.nested and (nested := _nested(k, caps)): return [tuple(base) + nested, tuple(base)]
  if caps.vector_ops and k.reduce_contiguous and k.lane_contiguous and (short := _short_row_lanes(k, caps)):
    return [tuple(base + short), tuple(base)]
  if caps.vector_ops and k.reduce_contiguous and not k.lane_contiguous:
    # vector accumulators along the reduce loop: each lane adds 1/width of the values, so the accumulator
    # cascade's block counts per lane and stays out of the inner loop. Not for one output: the CPU splits
    # that loop across threads itself, with scalar partials.
    width = vector_lanes(caps, k.reduce_itemsize) if k.out_size > 1 else 1
    unrolled = {o.axis for o in base}
    lanes = [Opt(OptOps.LANES, i, width) for i in k.innermost
             if i not in unrolled and width > 1 and k.reduce_axes[i] % width == 0 and k.reduce_axes[i] >= 2 * width]
    # a long lane loop adds LANES_UNROLL vectors per step, so the accumulator's chain waits on one add per that
    # many loads (row sum of 4096x4096 float32, AVX-512, two threads: 0.80 -> 0.72 ms)
    lanes += [Opt(OptOps.UNROLL, o.axis, LANES_UNROLL) for o in lanes
              if k.reduce_axes[o.axis] % (width * LANES_UNROLL) == 0 and k.reduce_axes[o.axis] >= 2 * width * LANES_UNROLL]
    if lanes and (tile := _dot_tile(k, caps)):
      if (short := _short_dot(k, caps, lanes)) is not None:
        return [tuple(base + short), tuple(base + lanes), tuple(base)]
      # no UNROLL on the lanes: the tile's accumulators are independent chains already
      return [tuple(base + [o for o in lanes if o.op is OptOps.LANES] + tile), tuple(base + lanes), tuple(base)]
    if k.reduce_transcendental and any(k.reduce_axes[o.axis] < TRANSCENDENTAL_LANES_FROM * width for o in lanes):
      # terms that compute a transcendental over a short loop, no tile: the compiler's own vectoriser interleaves
      # several iterations' polynomials, where lanes compute one vector's at a time (exp-sums of 1M float32, AVX-512,
      # kernels alone: rows of 32 140 -> 118 us, 128 111 -> 84, 256 90 -> 83; even at 512, lanes ahead from 1024)
      return [tuple(base)]
    # each group of c outputs along dim 0 reading the same c values along a reduce loop of c (a rank sort's pick of
    # each run of 16): c outputs per thread make the group's index math constants and share each load, where lanes
    # along the 16 terms left every output summing its lanes (int64, 1024x1024 sorted: 14.2 -> 11.3 ms)
    group = next((c for c in k.lane_divisors if c in k.reduce_axes and c <= MAX_PICK_GROUP and k.dims[0][0] == 1
                  and k.dims[0][1] % c == 0), None)
    if group: return [tuple(base + [Opt(OptOps.UPCAST, 0, group)])] + [tuple(base + lanes)] * bool(lanes) + [tuple(base)]
    if lanes: return [tuple(base + lanes), tuple(base)]
    # a contiguous reduce loop too short for lanes is left to the compiler's vectoriser, unless it is
    # unrolled away (a strided convolution's kernel width): then the outputs are tiled as below
    if not all(i in unrolled for i in k.innermost): return [tuple(base)]
  if not caps.vector_ops: return [tuple(base + _tiles(k, caps, vector=False))]
  vec, scalar = _tiles(k, caps, vector=True), _tiles(k, caps, vector=False)
  channel_plans: list[tuple[Opt, ...]] = []
  if any(o.op is OptOps.VECTORIZE and o.axis != 0 for o in vec):
    # lanes along the channels, then the plans with lanes along the row. Each tap reads one broadcast value, so the
    # taps stay loops (written out, 3x3 at 56x56 measured 3.8 -> 4.5 ms), except a padded one sliding along the row's
    # copies, whose gates are then constants per copy (5x5 padded by 2 at 20x20: 6.6 -> 5.4 ms; by 4, an input
    # gradient: 11.7 -> 7.8 ms)
    taps = {r for r, _ in k.sliding} - {o.axis for o in _tap_unrolls(k, lanes_only=True)}
    channel_plans = [tuple(o for o in base if not (o.op is OptOps.UNROLL and o.axis in taps)) + tuple(vec)]
    vec = _tiles(k, caps, vector=True, channels_ok=False)
  vec += _slide_unrolls(k, vec, base)
  if not any(o.op is OptOps.VECTORIZE for o in vec): return channel_plans + [tuple(base + vec)]
  # the vectors that divide dim 0 if masked ones do not apply, the scalar plan if the vectors only gather
  plans = channel_plans + [tuple(_row_tile_base(k, caps, base, vec) + vec),
                           tuple(base + _tiles(k, caps, vector=True, masked_ok=False))]
  if not k.lane_contiguous and k.dims[0][0] == 1 and \
      (c := next((c for c in k.lane_divisors if c <= MAX_DIVISOR_UPCAST and k.dims[0][1] % c == 0), None)):
    # vectors that would only gather, and loads that index dim 0 as x // c and x % c (a stride-2 pooling's
    # gradient): c outputs per thread make those constants in each copy (64x8x26x26 max-pool input gradient,
    # AVX-512: 1.0 -> 0.28 ms)
    plans.append(tuple(base + [Opt(OptOps.UPCAST, 0, c)]))
  return list(dict.fromkeys(plans + [tuple(base + scalar)]))


__all__ = ["hand_coded_optimizations", "vector_lanes", "UNROLL_REDUCE", "MAX_LANES"]
