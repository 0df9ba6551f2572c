"""The loop program: the lowering's output and every renderer's input."""
from __future__ import annotations

import functools
from dataclasses import dataclass

from typing import Mapping

from plugrad.dtype import DType
from plugrad.symbolic import sym_infer
from plugrad.uops import Ops, UOp


@dataclass(frozen=True)
class Param:
  """A buffer argument of a kernel: its position, element dtype and size, and whether it is written.

  :param image: (height, width) when the buffer is a 2D RGBA image on a device with images: flat
    element i lives at pixel (x=(i//4) % width, y=i // (4*width)), channel i % 4.
  """
  index: int
  dtype: DType
  size: int
  written: bool
  image: tuple[int, int] | None = None


@dataclass(frozen=True)
class LoopProgram:
  """A kernel as a flat list of UOps in execution order.

  Ops that appear: PARAM, CONST, SPECIAL (a launch index: arg (name, dim, size); a name starting
  with "gidx" is the global thread index of that dimension, "lidx" the index within the
  work-group; devices without launch dimensions loop over gidx), RANGE/ENDRANGE (a loop and its
  end), DEFINE_ACC/ACCUMULATE (a reduction accumulator and its update), LOAD/STORE (with an
  optional gate: a LOAD whose gate is false yields 0 and reads nothing; STORE src (buffer, index,
  value[, gate])), DEFINE_LOCAL (work-group memory, arg (id, size)) and BARRIER (src: the STOREs
  into local memory it waits for; a LOAD whose buffer is a BARRIER reads the local memory behind
  it), DEFINE_VAR (an int32 parameter of the kernel, arg (name, min, max), listed after the PARAMs in name
  order: the launch passes its value) and ALU ops.
  Every source of a UOp comes earlier in the list; a value defined inside a
  loop is used only inside it, except accumulators.

  Vectors appear only for devices whose Capabilities set `vector_ops`: a value of dtype
  `scalar.vec(n)` has n lanes; VECTORIZE builds one from n scalars, GEP (arg: the lane) takes
  one lane out; ALU ops, DEFINE_ACC and ACCUMULATE on vectors work lane by lane; a LOAD with
  a vector dtype reads n consecutive elements from its (scalar) index, under a scalar gate or, on
  devices that set `masked_loads`, a vector of n bools (lane k reads element index+k only where its
  gate is true, else gives 0); a STORE of a vector writes n consecutive elements from its index, under a
  scalar gate or, on those devices, a vector of n bools (lane k written only where its gate is true).

  :param global_size: threads per launch dimension (the sizes of the SPECIALs, in dim order). An entry may be
    a symbolic int (a UOp over the program's Variables; its SPECIAL then has it as src[0] and the largest
    size in arg): the engine evaluates it at each launch (`launch_dims`).
  :param local_size: threads per work-group per dimension, None on devices without work-groups.
  :param flops: an estimate of the operations the kernel performs.
  :param bytes_moved: bytes the kernel's buffers hold (an estimate of memory traffic).
  :param opts: the optimization plan the lowering applied (`plugrad.codegen.opt`).
  """
  name: str
  uops: tuple[UOp, ...]
  params: tuple[Param, ...]
  global_size: tuple[int, ...]
  local_size: tuple[int, ...] | None
  flops: int
  bytes_moved: int
  opts: tuple = ()

  @functools.cached_property  # asked on every launch
  def vars(self) -> tuple[UOp, ...]:
    """The kernel's Variables (DEFINE_VAR), in the order their values are passed at launch."""
    return tuple(u for u in self.uops if u.op is Ops.DEFINE_VAR)

  def launch_dims(self, var_vals: Mapping[UOp, int]) -> tuple[tuple[int, ...], tuple[int, ...] | None, tuple[int, ...]]:
    """(global size, local size, values of `vars`) of a launch with the Variables' values `var_vals`."""
    vs = self.vars
    if not vs: return self.global_size, self.local_size, ()
    try:
      vals = tuple(var_vals[v] for v in vs)
    except KeyError as e:
      raise ValueError(f"kernel {self.name} needs a value for Variable {e.args[0].arg[0]!r}") from None
    return tuple(sym_infer(g, var_vals) for g in self.global_size), self.local_size, vals

  def __str__(self) -> str:
    num = {u: i for i, u in enumerate(self.uops)}
    lines = [f"program {self.name} global={self.global_size} local={self.local_size} opts={list(self.opts)}"]
    depth = 0
    for i, u in enumerate(self.uops):
      if u.op is Ops.ENDRANGE: depth -= 1
      srcs = " ".join(f"%{num[s]}" for s in u.src)
      dt = f":{u.dtype.name}" + (f"x{u.dtype.count}" if u.dtype.count > 1 else "") if u.dtype is not None else ""
      arg = "" if u.arg is None else f" {u.arg!r}"
      lines.append(f"{'  ' * depth}%{i:<3} {u.op.name}{dt}{arg} {srcs}".rstrip())
      if u.op is Ops.RANGE: depth += 1
    return "\n".join(lines)
