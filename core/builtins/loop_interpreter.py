"""Whole-array evaluation of a loop program: the PYTHON reference device's runtime.

A kernel runs as numpy operations over arrays whose axes are the open loops and the launch grid:
one axis per loop nesting depth first (a loop at depth k, 0 at the top level, varies along axis
k), then the grid's dimensions; a vector value has its lanes on one more axis in front (so the
long grid axes stay innermost, where numpy's loops are fast). A loop is not iterated one index
at a time: its variable is an arange along its axis, so each UOp of a loop nest is one numpy
operation over every iteration at once, and an accumulator update is a fold over the axes of the
loops opened since the accumulator was defined (outermost first, so each step of the fold is one
contiguous slab over the grid). A value that does not vary along an axis has size 1 there and
broadcasts, so a load of a[i, k] in an (i, j, k) nest gathers only len(i) * len(k) elements.

What it computes is the loop program's sequential meaning, not an approximation of it:

- a fold runs in loop order, in the accumulator's dtype (`ufunc.accumulate`; bfloat16 rounded
  after every step), so a float32 sum loses exactly the precision of a device's sequential loop;
- a loop whose iterations depend on each other (it reads an accumulator it updates, stores to a
  buffer it also loads or stores elsewhere, or bounds an inner loop by its variable) runs one
  iteration at a time, and so do the loops around it that an accumulator's order crosses;
- a nest too big to hold at once runs its outermost loops in chunks, in order;
- every load and store is bounds-checked: an out-of-bounds access raises IndexError.

The threads of the launch grid run in lockstep: each UOp runs for every thread before the next
one does, which is what a barrier asks for (a kernel whose threads read what other threads write
without one is racy on any device).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from plugrad.alu import exec_alu, to_np_compute
from plugrad.device import fragment_positions
from plugrad.dtype import DType, bf16_to_f32, dtypes, f32_to_bf16
from plugrad.uops import GroupOp, Ops

Instr = tuple[Ops, DType | None, Any, tuple[int, ...]]  # (op, dtype, arg, positions of the sources)

# elements one step of a loop nest may span (per array, lanes counted); a bigger nest runs its
# outer loops in chunks. Big enough that numpy, not Python, dominates; small enough for memory.
CHUNK_ELEMENTS = 1 << 21
FOLD_ROWS = 512  # a fold over at least this many outputs runs step by step, each step one array operation
_FOLD = {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum, Ops.MIN: np.minimum}
# integer and bool ops whose result can stay constant along an axis their operands vary along
# (i // 512 over a chunk of i inside one block of 512, a gate over a chunk inside the valid region)
_STEPWISE = frozenset({Ops.IDIV, Ops.MOD, Ops.SHR, Ops.AND, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ})


def _within_blocks(chunk: int, block: int) -> int:
  """A chunk size that divides `block`, so that i // block is one value over a chunk (its axis then
  drops, see `_drop_constant_axes`): the largest divisor up to `chunk`, unless that is much smaller."""
  divisors = {d for k in range(1, math.isqrt(block) + 1) if block % k == 0 for d in (k, block // k)}
  best = max(d for d in divisors if d <= chunk)
  return best if best * 4 >= chunk else chunk


def _drop_constant_axes(x: np.ndarray, first: int) -> np.ndarray:
  """`x` with size 1 along every axis from `first` on that it does not vary along: what depends on it
  then broadcasts there instead of being computed (or gathered from memory) once per index."""
  for ax in range(first, x.ndim):
    if x.shape[ax] > 1:
      head = x[(slice(None),) * ax + (slice(0, 1),)]
      if (x == head).all(): x = head
  return x


class MalformedProgram(ValueError):
  """The program breaks a structural rule of the loop program (see `LoopInterpreter`)."""


@dataclass(eq=False)
class _Loop:
  """A RANGE ... ENDRANGE block: its variable varies along axis `depth`."""
  pc: int
  depth: int
  body: list[tuple[int | _Loop, tuple[int, ...]]] = field(default_factory=list)  # (statement, values dead after it)
  sequential: bool = False  # iterations depend on each other: one at a time
  inner: int = 1  # elements of one iteration's inner nest (from constant bounds), to size chunks
  block: int = 0  # the loop's variable is divided by this (i // block, i % block): chunks should not straddle one


class LoopInterpreter:
  """Runs one loop program (see `plugrad.codegen.program.LoopProgram`) with numpy.

  Beyond the program spec it requires what its meaning needs: loops nest, every value is used
  inside the loops open where it is defined (accumulators too: their updates and reads), and an
  ACCUMULATE updates a DEFINE_ACC. A violation raises MalformedProgram when it is built.

  :param name: the kernel's name, for error messages.
  :param global_size: the launch grid (-1 for a size given at each launch: it depends on a Variable).
  :param prog: the program, one (op, dtype, arg, source positions) per UOp in execution order.
  """

  def __init__(self, name: str, global_size: tuple[int, ...], prog: list[Instr]):
    self.name, self.grid, self.prog = name, tuple(global_size), prog
    self.scope: list[tuple[int, ...]] = []  # the loops open where each value lives (a RANGE: itself included)
    self.body: list[tuple[int | _Loop, tuple[int, ...]]] = []
    self.loops: dict[int, _Loop] = {}
    self._nest()
    self._mark_sequential()
    self._size_nests(self.body)
    self._find_blocks()
    self._schedule_frees()
    self.depth = max((lp.depth + 1 for lp in self.loops.values()), default=0)  # of the deepest loop nest
    self.ndim = self.depth + len(self.grid)
    self.lanes = max((dt.count for _, dt, _, _ in prog if dt is not None), default=1)
    self.var_pcs = [pc for pc, ins in enumerate(prog) if ins[0] is Ops.DEFINE_VAR]  # in the order values are passed

  # ---------------------------------------------------------------- analysis

  def _nest(self) -> None:
    """Build the loop tree and check that loops nest and values stay in their loops' scope."""
    stack: list[_Loop] = []
    for pc, (op, _, _, src) in enumerate(self.prog):
      if any(not 0 <= s < pc for s in src):
        raise MalformedProgram(f"%{pc} {op.name} uses a value not defined before it")
      open_pcs = tuple(lp.pc for lp in stack)
      if op is Ops.ENDRANGE:
        if not stack or src != (stack[-1].pc,): raise MalformedProgram(f"%{pc}: loops do not nest")
        stack.pop()
        self.scope.append(open_pcs[:-1])
        continue
      stmts = stack[-1].body if stack else self.body
      if op is Ops.RANGE:
        loop = _Loop(pc, len(stack))
        self.loops[pc] = loop
        stmts.append((loop, ()))
        stack.append(loop)
        self.scope.append(open_pcs + (pc,))
      else:
        stmts.append((pc, ()))
        self.scope.append(open_pcs)
      if op is Ops.ACCUMULATE and self.prog[src[0]][0] is not Ops.DEFINE_ACC:
        raise MalformedProgram(f"%{pc} ACCUMULATE updates %{src[0]}, which is not a DEFINE_ACC")
      for s in src:
        if self.scope[s] != self.scope[pc][:len(self.scope[s])]:
          raise MalformedProgram(f"%{pc} {op.name} uses %{s} outside the loop that defines it")
    if stack: raise MalformedProgram(f"{len(stack)} loop(s) never closed")

  def _memory_of(self, pc: int) -> tuple[str, int] | None:
    """The memory a LOAD or STORE touches: ("param", index) or ("local", pc of the DEFINE_LOCAL)."""
    op, _, _, src = self.prog[pc]
    if op not in (Ops.LOAD, Ops.STORE): return None
    buf = self.prog[src[0]]
    if buf[0] is Ops.PARAM: return ("param", buf[2][0])
    if buf[0] is Ops.BARRIER: return ("local", self.prog[buf[3][0]][3][0])  # the local memory its STOREs wrote
    return ("local", src[0])

  def _mark_sequential(self) -> None:
    """Mark the loops whose iterations depend on each other, and the loops an accumulator's order
    crosses outside those."""
    seq: set[int] = set()

    def shared(a: int, b: int, outer: tuple[int, ...] = ()) -> set[int]:
      return (set(self.scope[a]) & set(self.scope[b])) - set(outer)

    updates: dict[int, list[int]] = {}
    reads: dict[int, list[int]] = {}
    accesses: dict[tuple[str, int], list[int]] = {}
    for pc, (op, _, _, src) in enumerate(self.prog):
      for i, s in enumerate(src):
        if self.prog[s][0] is not Ops.DEFINE_ACC: continue
        (updates if op is Ops.ACCUMULATE and i == 0 else reads).setdefault(s, []).append(pc)
      if (mem := self._memory_of(pc)) is not None: accesses.setdefault(mem, []).append(pc)
      if op is Ops.RANGE: seq |= set(self._ranges_under(src[0]))  # a bound that changes with an outer loop
    for acc, ups in updates.items():
      # a read sees the updates before it; two updates of one accumulator in a loop interleave
      for u in ups:
        for other in reads.get(acc, []) + [x for x in ups if x != u]:
          seq |= shared(u, other, self.scope[acc])
    for pcs in accesses.values():
      stores = [pc for pc in pcs if self.prog[pc][0] is Ops.STORE]
      for st in stores:
        for other in pcs:
          if other != st: seq |= shared(st, other)
    # a fold runs in loop order only if the loops it crosses outside a one-at-a-time loop run one
    # at a time too (marking them may reach the crossings of other folds: repeat until stable)
    while True:
      before = len(seq)
      for acc, ups in updates.items():
        for u in ups:
          crossed = self.scope[u][len(self.scope[acc]):]
          inner = max((i for i, lp in enumerate(crossed) if lp in seq), default=-1)
          seq |= set(crossed[:inner])
      if len(seq) == before: break
    for pc in seq: self.loops[pc].sequential = True

  def _ranges_under(self, pc: int) -> set[int]:
    """The RANGEs a value depends on."""
    todo, seen, out = [pc], set(), set()
    while todo:
      p = todo.pop()
      if p in seen: continue
      seen.add(p)
      if self.prog[p][0] is Ops.RANGE: out.add(p)
      todo.extend(self.prog[p][3])
    return out

  def _size_nests(self, body: list) -> int:
    """Set each loop's `inner` volume; return the volume of the largest loop nest in `body`."""
    biggest = 1
    for stmt, _ in body:
      if not isinstance(stmt, _Loop): continue
      stmt.inner = self._size_nests(stmt.body)
      end = self.prog[self.prog[stmt.pc][3][0]]
      extent = 1 if stmt.sequential or end[0] is not Ops.CONST else max(int(end[2]), 1)
      biggest = max(biggest, extent * stmt.inner)
    return biggest

  def _find_blocks(self) -> None:
    """Record, per loop, the constant its variable is divided by (for several, their gcd)."""
    for op, _, _, src in self.prog:
      if op not in (Ops.IDIV, Ops.MOD) or src[0] not in self.loops: continue
      divisor = self.prog[src[1]]
      if divisor[0] is Ops.CONST and divisor[2] > 1:
        loop = self.loops[src[0]]
        loop.block = math.gcd(loop.block, int(divisor[2]))

  def _schedule_frees(self) -> None:
    """Attach to each statement the values whose last use it is, so a nest holds few arrays at once."""
    last_use = list(range(len(self.prog)))
    for pc, (op, _, _, src) in enumerate(self.prog):
      uses = src + ((self.prog[src[0]][3][0],) if op is Ops.BARRIER else ())  # a barrier reads its local memory
      for s in uses: last_use[s] = pc
    dead_after: dict[int, list[int]] = {}  # statement (its pc) -> values dead after it
    for pc, (op, _, _, _) in enumerate(self.prog):
      if op in (Ops.RANGE, Ops.ENDRANGE, Ops.PARAM): continue
      user, own = last_use[pc], self.scope[pc]
      # the statement of this value's block that holds the last use: the use itself or a loop around it
      stmt = self.scope[user][len(own)] if len(self.scope[user]) > len(own) else user
      dead_after.setdefault(stmt, []).append(pc)

    def attach(body: list) -> list:
      out = []
      for stmt, _ in body:
        key = stmt.pc if isinstance(stmt, _Loop) else stmt
        if isinstance(stmt, _Loop): stmt.body = attach(stmt.body)
        out.append((stmt, tuple(dead_after.get(key, ()))))
      return out
    self.body = attach(self.body)

  # ---------------------------------------------------------------- execution

  def run(self, bufs: tuple[np.ndarray, ...], local_size: tuple[int, ...] | None = None,
          global_size: tuple[int, ...] | None = None, vals: tuple[int, ...] = ()) -> None:
    """Run the program on the byte buffers `bufs` (one per PARAM index) for every thread of the grid.

    :param local_size: the work-group size per dimension (None: one group spans each dimension).
    :param global_size: the grid of this launch (None: the program's own; needed when it depends on a Variable).
    :param vals: the values of the program's DEFINE_VARs, in program order.
    """
    if len(vals) != len(self.var_pcs):
      raise ValueError(f"{self.name} takes {len(self.var_pcs)} Variable value(s), got {len(vals)}")
    grid = tuple(global_size) if global_size is not None else self.grid
    if len(grid) != len(self.grid) or any(g < 0 for g in grid):
      raise ValueError(f"{self.name}: launch grid {grid} for a program launched on {self.grid}")
    _Run(self, bufs, tuple(local_size) if local_size else grid, grid, dict(zip(self.var_pcs, vals))).block(self.body)


class _Run:
  """The state of one launch: every value as an array over the grid and the open loops' axes."""

  def __init__(self, interp: LoopInterpreter, bufs: tuple[np.ndarray, ...], local: tuple[int, ...],
               grid: tuple[int, ...], var_vals: dict[int, int]):
    self.interp, self.bufs, self.local, self.grid, self.var_vals = interp, bufs, local, grid, var_vals
    self.vals: list[Any] = [None] * len(interp.prog)
    self.shape = [1] * interp.depth + list(grid)  # current extent of every axis
    self.chunkable = True  # every open loop runs one iteration at a time, so the next may run in chunks
    # each thread's work-group coordinates, which pick its group's copy of local memory
    pairs = list(zip(grid, local))
    self.group_of = tuple(self._along(interp.depth + d, np.arange(g) // lo) for d, (g, lo) in enumerate(pairs))
    self.groups = tuple(g // lo for g, lo in pairs)

  def _along(self, axis: int, values: np.ndarray) -> np.ndarray:
    shape = [1] * self.interp.ndim
    shape[axis] = len(values)
    return values.reshape(shape)

  def block(self, body: list) -> None:
    for stmt, dead in body:
      if isinstance(stmt, _Loop): self.loop(stmt)
      else: self.instr(stmt)
      for pc in dead: self.vals[pc] = None

  def loop(self, lp: _Loop) -> None:
    ip = self.interp
    _, dt, _, src = ip.prog[lp.pc]
    bound = np.asarray(self.vals[src[0]])
    if bound.size > 1 and not (bound == bound.flat[0]).all():
      raise RuntimeError(f"{ip.name}: the bound of loop %{lp.pc} differs between threads; "
                         "the PYTHON device needs it uniform")
    end = int(bound.flat[0]) if bound.size else 0
    if end <= 0: return  # an empty loop: its body never runs
    if lp.sequential: chunk = 1
    elif self.chunkable:  # as many iterations as fit the budget, the whole inner nest in each
      chunk = max(1, min(end, CHUNK_ELEMENTS // max(1, math.prod(self.shape) * lp.inner * ip.lanes)))
      if lp.block and chunk < end: chunk = _within_blocks(chunk, lp.block)
    else: chunk = end
    was_chunkable = self.chunkable
    self.chunkable = was_chunkable and chunk == 1
    for start in range(0, end, chunk):
      stop = min(start + chunk, end)
      self.shape[lp.depth] = stop - start
      self.vals[lp.pc] = self._along(lp.depth, np.arange(start, stop, dtype=dt.np))
      self.block(lp.body)
    self.shape[lp.depth] = 1
    self.vals[lp.pc] = None
    self.chunkable = was_chunkable

  def instr(self, pc: int) -> None:
    ip, vals = self.interp, self.vals
    op, dt, arg, src = ip.prog[pc]
    if op is Ops.PARAM:
      # the allocator rounds empty buffers up to one byte: view exactly the param's elements
      vals[pc] = self.bufs[arg[0]][:arg[1] * dt.itemsize].view(dt.storage_np)
    elif op is Ops.CONST: vals[pc] = to_np_compute(arg, dt)
    elif op is Ops.DEFINE_VAR: vals[pc] = to_np_compute(self.var_vals[pc], dt)
    elif op is Ops.SPECIAL:
      name, d, _ = arg
      index = np.arange(self.grid[d], dtype=dt.np)
      vals[pc] = self._along(ip.depth + d, index % self.local[d] if name.startswith("lidx") else index)
    elif op is Ops.DEFINE_ACC: vals[pc] = vals[src[0]]
    elif op is Ops.ACCUMULATE: vals[src[0]] = self.fold(pc)
    elif op is Ops.DEFINE_LOCAL: vals[pc] = np.zeros((arg[1],) + self.groups, dtype=dt.np)
    elif op is Ops.BARRIER:  # every UOp runs for the whole grid at once: the stores before it are all done
      vals[pc] = vals[ip.prog[src[0]][3][0]]
    elif op is Ops.LOAD: vals[pc] = self.load(pc)
    elif op is Ops.STORE: self.store(pc)
    elif op is Ops.VECTORIZE:
      lanes = [vals[s] for s in src]
      shape = np.broadcast_shapes(*(np.shape(v) for v in lanes))
      vals[pc] = np.stack([np.broadcast_to(v, (1,) * (ip.ndim - len(shape)) + shape) for v in lanes])
    elif op is Ops.GEP: vals[pc] = vals[src[0]][arg]
    elif op is Ops.WMMA: vals[pc] = self.wmma(arg, *(vals[s] for s in src))
    elif op in GroupOp.ALU:
      out = exec_alu(op, dt, [vals[s] for s in src], [ip.prog[s][1] for s in src])
      # index math and gates only (data seldom repeats); a vector keeps its lanes axis whole for GEP
      stepwise = op in _STEPWISE and not ip.prog[src[0]][1].is_float
      vals[pc] = _drop_constant_axes(out, int(dt.count > 1)) if stepwise else out
    else: raise RuntimeError(f"PYTHON device cannot run {op}")

  def wmma(self, arg: tuple, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """A warp's D = A·B + C (`TensorCore`): the fragments of the `threads` consecutive threads of launch dimension 0
    put together into the matrices, multiplied in float32 (the products of halves are exact there; a device's tensor
    core may add them in another order), and each thread's fragment of D taken back out. Launch dim 0's size is a
    whole number of warps (the lowering's work-groups are)."""
    _, (m, n, k), threads, la, lb, lc = arg
    depth = self.interp.depth
    shape = list(np.broadcast_shapes(*(np.shape(v)[1:] for v in (a, b, c))))
    shape[depth] = self.grid[0]  # every thread of the warp has its own fragment
    warps = shape[depth] // threads

    def by_lane(v: np.ndarray) -> np.ndarray:  # (..., warps, threads, elements): the warp's lanes side by side
      v = np.moveaxis(np.broadcast_to(v, (v.shape[0], *shape)).astype(np.float32), 0, -1)
      v = np.moveaxis(v, depth, -2)
      return v.reshape(v.shape[:-2] + (warps, threads, v.shape[-1]))

    def matrix(v: np.ndarray, layout: tuple, rows: int, cols: int) -> np.ndarray:
      pos = fragment_positions(layout, threads, v.shape[-1])
      out = np.zeros(v.shape[:-2] + (rows, cols), dtype=np.float32)
      out[..., pos[..., 0], pos[..., 1]] = v
      return out

    d = matrix(by_lane(a), la, m, k) @ matrix(by_lane(b), lb, k, n) + matrix(by_lane(c), lc, m, n)
    pos = fragment_positions(lc, threads, c.shape[0])
    frag = d[..., pos[..., 0], pos[..., 1]]  # (..., warps, threads, elements)
    frag = frag.reshape(frag.shape[:-3] + (shape[depth], frag.shape[-1]))
    return np.moveaxis(np.moveaxis(frag, -2, depth), -1, 0)

  def fold(self, pc: int) -> np.ndarray:
    """The accumulator after ACCUMULATE `pc` ran once per iteration of the loops opened since the
    accumulator was defined, in loop order: acc op v[first] op v[second] ... in its dtype."""
    ip = self.interp
    _, dt, op, (acc_pc, val_pc) = ip.prog[pc]
    acc, val = self.vals[acc_pc], self.vals[val_pc]
    lane = int(dt.count > 1)  # a vector's lanes come first
    lo, hi = lane + len(ip.scope[acc_pc]), lane + len(ip.scope[pc])  # the axes of the loops opened since the definition
    if lo == hi: return exec_alu(op, dt, [acc, val], [dt, dt])
    extents = [1] * (lane + ip.ndim)
    extents[lo:hi] = self.shape[lo - lane:hi - lane]
    full = np.broadcast_shapes(np.shape(acc), np.shape(val), tuple(extents))
    pre, steps, post = full[:lo], math.prod(full[lo:hi]), full[hi:]
    updates = np.broadcast_to(val, full).reshape(pre + (steps,) + post)  # in loop order along axis lo
    # the accumulator does not vary along the loops it folds (it was defined outside them)
    start = np.broadcast_to(acc, pre + (1,) * (hi - lo) + post).reshape(pre + post)
    at = (slice(None),) * lo
    with np.errstate(all="ignore"):
      if dt.scalar() == dtypes.bfloat16 or math.prod(pre + post) >= FOLD_ROWS:
        # one array operation per step over every output, each step a contiguous slab (bfloat16 is
        # computed in float32 and rounded after every step)
        out = np.array(start, dtype=dt.np)
        for k in range(steps):
          if dt.scalar() == dtypes.bfloat16: out = exec_alu(op, dt, [out, updates[at + (k,)]], [dt, dt])
          else: _FOLD[op](out, updates[at + (k,)], out=out)
      else:
        # few outputs: each output's chain of updates at once, the accumulator folded into the first
        chain = np.array(updates, dtype=dt.np)
        chain[at + (0,)] = exec_alu(op, dt, [start, chain[at + (0,)]], [dt, dt])
        _FOLD[op].accumulate(chain, axis=lo, out=chain)
        out = chain[at + (-1,)].copy()
    return np.expand_dims(out, tuple(range(lo, hi)))

  def _live(self, pc: int, is_store: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """The element index and gate of a LOAD or STORE (a vector's indices with its lanes in front)."""
    _, dt, _, src = self.interp.prog[pc]
    n = self.interp.prog[src[2]][1].count if is_store else dt.count
    gate_pos = 3 if is_store else 2
    idx, gate = np.asarray(self.vals[src[1]]), self.vals[src[gate_pos]] if len(src) > gate_pos else None
    if n > 1:  # a vector touches n consecutive elements from its index
      idx = idx + np.arange(n, dtype=idx.dtype).reshape((n,) + (1,) * self.interp.ndim)
    return idx, gate

  def _check(self, kind: str, idx: np.ndarray, size: int) -> None:
    # seen as unsigned, a negative index is huge: one comparison finds both kinds of overrun
    if idx.size and (idx.view(np.dtype(f"u{idx.dtype.itemsize}")) >= size).any():
      raise IndexError(f"{self.interp.name}: {kind} out of bounds: index range [{idx.min()}, {idx.max()}] "
                       f"for a buffer of {size}")

  def load(self, pc: int) -> np.ndarray:
    _, dt, _, src = self.interp.prog[pc]
    idx, gate = self._live(pc, False)
    mem = self.vals[src[0]]
    local = self.interp.prog[src[0]][0] is Ops.BARRIER
    sel = np.broadcast_arrays(idx, *self.group_of) if local else [idx]
    if gate is not None:
      *sel, gate = np.broadcast_arrays(*sel, np.asarray(gate))
    live = sel[0] if gate is None else sel[0][gate]  # a false gate reads nothing, not even index 0
    self._check("load", live, len(mem))
    if gate is None: v = mem[tuple(sel)] if local else mem.take(idx, mode="wrap")  # in bounds: take is quicker
    else:
      v = np.zeros(sel[0].shape, mem.dtype)
      v[gate] = mem[tuple(s[gate] for s in sel)]
    return bf16_to_f32(v) if not local and dt.scalar() == dtypes.bfloat16 else v

  def store(self, pc: int) -> None:
    prog = self.interp.prog
    _, _, _, src = prog[pc]
    idx, gate = self._live(pc, True)
    mem = self.vals[src[0]]
    local = prog[src[0]][0] is Ops.DEFINE_LOCAL
    sel = [idx, *self.group_of] if local else [idx]
    arrays = np.broadcast_arrays(*sel, self.vals[src[2]], *(() if gate is None else (np.asarray(gate),)))
    if gate is not None: arrays = [a[arrays[-1]] for a in arrays[:-1]]
    *sel, val = (np.asarray(a).reshape(-1) for a in arrays)
    self._check("store", sel[0], len(mem))
    if local: mem[tuple(sel)] = val
    else:
      dt = prog[src[0]][1]
      mem[sel[0]] = f32_to_bf16(val) if dt == dtypes.bfloat16 else val.astype(dt.storage_np, copy=False)


__all__ = ["Instr", "LoopInterpreter", "MalformedProgram", "CHUNK_ELEMENTS", "FOLD_ROWS"]
