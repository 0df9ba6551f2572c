"""Kernel optimizations as data.

An optimization plan is a tuple of `Opt`s: which output dimension computes several outputs per
thread (UPCAST: scalar copies, VECTORIZE: vector lanes), which reduce axis is written out in the
loop body (UNROLL), whether a reduction is split across a work-group (GROUP), which launch dimension is
the outermost loop on a device that loops over its launch (OUTER), and whether a long sum's blocks run as a launch
loop inside groups of its rows there (BLOCK). The lowering
applies a plan and makes no choice of its own: `heuristic.hand_coded_optimizations` proposes plans
from the kernel's `KernelFeatures` and the device's Capabilities, and a plan can be printed,
compared, pinned in a test or searched.

Axes: UPCAST and VECTORIZE name a launch dimension (0 is the innermost, contiguous output
dimension); UNROLL names a reduce axis in the kernel's order (every REDUCE_AXIS in topological
order, its reduced axes of size > 1 in increasing order); GROUP uses axis 0 (the one reduction); OUTER and BLOCK
name a launch dimension. TC names a tensor core; with it UPCAST and LOCAL count tiles and warps (see OptOps).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto


class OptOps(Enum):
  """The kinds of optimization."""
  UPCAST = auto()     # launch dim `axis` computes `amount` neighbouring outputs per thread, as scalar copies
  VECTORIZE = auto()  # launch dim `axis` computes `amount` neighbouring outputs per thread as vector lanes (lanes
                     # past its end masked only on dim 0)
  UNROLL = auto()     # reduce axis `axis`: `amount` consecutive iterations written out in the loop body
  GROUP = auto()      # the reduction is split across `amount` threads of a work-group (local memory)
  LANES = auto()      # reduce axis `axis`: `amount` consecutive iterations as vector lanes, each lane its own
                      # accumulator (a vector accumulator), the lanes combined after the loop
  OUTER = auto()      # launch dim `axis` becomes the outermost loop (devices that loop over their launch dims;
                      # `amount` 1): the tiles along it are the ones threads split, the others are swept inside
  BLOCK = auto()      # launch dim `axis` is cut into groups of `amount` (devices that loop over their launch dims):
                      # for each group, the blocks a long float sum is cut into (the outer loop of its accumulators,
                      # lowerer.split_accumulators) run one after the other, each over the whole group and adding its
                      # partial sums to the outputs in memory; a matmul's rows in a group share each block of B

  TC = auto()         # the matmul runs on the device's tensor core number `axis` (Capabilities.tensor_cores; `amount`
                      # 1): each warp computes tiles of its (M, N); UPCAST 0 and 1 then count the tiles a warp computes
                      # along the columns and the rows
  LOCAL = auto()      # (with TC) a work-group holds `amount` warps along launch dim `axis` (0: columns, 1: rows)

  def __repr__(self) -> str: return f"OptOps.{self.name}"


@dataclass(frozen=True)
class Opt:
  """One optimization: `op` applied to `axis` with `amount`."""
  op: OptOps
  axis: int
  amount: int

  def __repr__(self) -> str: return f"Opt({self.op.name}, {self.axis}, {self.amount})"


class OptError(ValueError):
  """An Opt that does not apply to the kernel (an axis that is not there, an amount that does not
  divide it, a vector that would only gather). Search and the heuristic's fallbacks skip such plans."""


@dataclass(frozen=True)
class KernelFeatures:
  """What the heuristic reads from a kernel (computed by the lowering, `lowerer.kernel_features`).

  :param dims: the launch dimensions without a work-group split: (number of output axes merged, size),
    innermost first.
  :param group_dims_ok: whether the output still fits the launch dimensions when one is taken by a GROUP.
  :param reduce_axes: sizes of the kernel's reduce axes (size > 1), in UNROLL's axis order.
  :param innermost: the reduce axes (UNROLL's numbering) that are the last axis of their reduction.
  :param reuse_dims: launch dims (> 0) that no lane-contiguous load moves with: a tile along one reuses
    each vector load (a matmul's rows, a convolution's output channels).
  :param contiguous_dims: the reuse dims some load in a reduce loop reads neighbouring elements along (a convolution's
    weight laid out with its output channels innermost): VECTORIZE there loads vectors.
  :param body_ops: the float operations inside the reduce loops (a convolution's multiply: 1; with a bias and ReLU
    applied to what it reads: 3).
  :param reduces: how many REDUCE_AXIS nodes the kernel has; `nested`: whether one is inside another.
  :param outputs: how many buffers the kernel writes (a horizontally fused kernel writes several).
  :param out_size: output elements; `itemsize`: bytes per output element; `reduce_itemsize`: bytes per
    element of the (one) reduction's accumulator.
  :param lane_contiguous: some load reads neighbouring elements for neighbouring outputs of launch dim 0 (read on a
    device that loops over its launch with vector ops, and for a reduction on one with launch indices, as is
    `reduce_contiguous`).
  :param lane_divisors: constants c > 1 by which some load's index divides launch dim 0's index or takes its
    remainder (`x // 2`, `x % 2`: a stride-2 pooling's gradient); c outputs per thread along dim 0 make them
    constants in each copy, and an elementwise kernel's vector lanes fold them per lane.
  :param sliding: (reduce axis, launch dim) pairs where some load moves alike with the axis's loop and the dim's
    index (a convolution's kernel rows slide along the image rows: row y + ky).
  :param padded_taps: the reduce axes of `sliding` whose load is gated (a padded convolution's kernel taps: whether
    a tap reads the image or the padding depends on the tap).
  :param unit_dims: (an elementwise kernel, on a device that loops over its launch with vector ops) the launch dims
    some load reads neighbouring elements along.
  :param lane_strided: (the same) some load moves with launch dim 0 without reading neighbouring elements along it
    (a transposed read).
  :param computes_sin: the kernel computes a sin (on a CPU, one of unknown bounds branches to a library call for far
    arguments, which keeps a compiler's loop vectoriser out: the heuristic vectorises such an elementwise kernel).
  :param reduce_transcendental: a reduction's terms compute a transcendental (exp2, log2, sin, cos: a softmax's
    denominator sums exp(x - max)).
  :param sum_block: (a kernel of one float sum over one axis) the terms each iteration of the sum's outer
    accumulator loop adds, where the lowering cuts the sum into blocks (`lowerer.split_accumulators`: a sum of more
    than ACC_BLOCK terms); 0 where it does not.
  :param reduce_contiguous: every load that moves with the innermost reduce loop reads neighbouring
    elements in it (a row sum, a dot product's row): the device's loop vectoriser keeps vector
    accumulators along the reduce axis by itself.
  :param tensor_cores: the positions in Capabilities.tensor_cores of those that compute the kernel (a matmul of their
    input dtype, their tile dividing its sizes: `codegen.tensor_core`); `matmul`: its (M, N, K, batch) where it is one.
  :param tc_cascade: the first of those tensor cores would add the sum as a cascade (more than ACC_BLOCK steps of its K:
    each tile's fragment hands its sum to scalar accumulators, which take registers of their own).
  """
  dims: tuple[tuple[int, int], ...]
  group_dims_ok: bool
  reduce_axes: tuple[int, ...]
  reduces: int
  nested: bool
  out_size: int
  itemsize: int
  reduce_itemsize: int = 4
  lane_contiguous: bool = False
  reduce_contiguous: bool = False
  innermost: tuple[int, ...] = ()
  reuse_dims: tuple[int, ...] = ()
  contiguous_dims: tuple[int, ...] = ()
  body_ops: int = 0
  outputs: int = 1
  lane_divisors: tuple[int, ...] = ()
  sliding: tuple[tuple[int, int], ...] = ()
  padded_taps: tuple[int, ...] = ()
  unit_dims: tuple[int, ...] = ()
  lane_strided: bool = False
  computes_sin: bool = False
  reduce_transcendental: bool = False
  sum_block: int = 0
  tensor_cores: tuple[int, ...] = ()
  matmul: tuple[int, int, int, int] = (0, 0, 0, 0)
  tc_cascade: bool = False


__all__ = ["Opt", "OptOps", "OptError", "KernelFeatures"]
