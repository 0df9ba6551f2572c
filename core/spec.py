"""The IR spec of each stage, as pattern tables whose rules return True for well-formed nodes.

`check_spec(graph, spec, stage)` (plugrad.uops) raises SpecError naming the first node no rule
accepts. The engine checks every graph it handles when `Config.check_spec` is on (the test suite
turns it on), so a pass that produces an ill-formed graph fails at that pass.
"""
from __future__ import annotations

from plugrad.codegen.program import LoopProgram
from plugrad.dtype import DType, dtypes
from plugrad.uops import GroupOp, Ops, PatternMatcher, SpecError, UOp, UPat

FLOAT_ONLY = {Ops.RECIP, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.COS, Ops.TRUNC, Ops.FDIV}
INT_ONLY = {Ops.SHL, Ops.SHR}
NUMERIC = {Ops.IDIV, Ops.MOD}  # ints and floats (on floats trunc(a / b) and fmod), never bool
BITWISE = {Ops.AND, Ops.OR, Ops.XOR}


def _alu_ok(u: UOp) -> bool:
  """Dtype rules every ALU node obeys, in every stage. A vector op obeys them lane by lane: its
  sources have as many lanes as it does."""
  if u.dtype is None or any(x.dtype is None for x in u.src): return False
  if any(x.dtype.count != u.dtype.count for x in u.src): return False
  return _alu_types_ok(u.op, u.dtype.scalar(), [x.dtype.scalar() for x in u.src])


def _alu_types_ok(op: Ops, dt: DType, s: list[DType]) -> bool:
  if op is Ops.CAST: return len(s) == 1
  if op is Ops.BITCAST: return len(s) == 1 and s[0].itemsize == dt.itemsize
  if op is Ops.WHERE: return len(s) == 3 and s[0] == dtypes.bool and s[1] == s[2] == dt
  if op in FLOAT_ONLY and not dt.is_float: return False
  if op in INT_ONLY and not dt.is_int: return False
  if op in NUMERIC and dt == dtypes.bool: return False
  if op in BITWISE and dt.is_float: return False
  if op in GroupOp.Comparison: return len(s) == 2 and s[0] == s[1] and dt == dtypes.bool
  if op in (Ops.SHL, Ops.SHR): return len(s) == 2 and s[0] == dt and s[1].is_int
  if op in GroupOp.Unary: return len(s) == 1 and s[0] == dt
  return len(s) == 2 and s[0] == s[1] == dt


def _movement_ok(u: UOp) -> bool:
  if len(u.src) != 1 or u.dtype != u.src[0].dtype: return False
  src = u.src[0].shape
  if u.op is Ops.RESHAPE:
    if not all(_sint_ok(s) for s in u.arg): return False
    # a symbolic view of a buffer allocated for the variables' maximum reads its start: not all of it
    return _numel(u.arg) == _numel(src) or _symbolic(u.arg + src)
  if u.op is Ops.EXPAND: return len(u.arg) == len(src) and all(a == b or b == 1 for a, b in zip(u.arg, src))
  if u.op is Ops.PERMUTE: return sorted(u.arg) == list(range(len(src)))
  if u.op is Ops.PAD: return len(u.arg[0]) == len(src) and all(b >= 0 and a >= 0 for b, a in u.arg[0])
  if u.op is Ops.SHRINK: return len(u.arg) == len(src) and all(0 <= b <= e <= s for (b, e), s in zip(u.arg, src))
  if u.op is Ops.FLIP: return all(0 <= a < len(src) for a in u.arg)
  return False


def _sint_ok(s) -> bool:
  # a dimension: a nonnegative int, or a symbolic int (an int expression of Variables)
  if isinstance(s, UOp): return s.symbolic and s.dtype == dtypes.int32 and s.vmin >= 0
  return isinstance(s, int) and s >= 0


def _symbolic(shape) -> bool: return any(isinstance(s, UOp) for s in shape)


def _var_ok(u: UOp) -> bool:
  # DEFINE_VAR: a named int32 with its range [min, max], 0 <= min <= max
  if u.src != () or u.dtype != dtypes.int32 or not isinstance(u.arg, tuple) or len(u.arg) != 3: return False
  name, lo, hi = u.arg
  return isinstance(name, str) and isinstance(lo, int) and isinstance(hi, int) and 0 <= lo <= hi


def _bind_ok(u: UOp) -> bool:
  # BIND: a Variable and a CONST value within its range
  return len(u.src) == 2 and u.src[0].op is Ops.DEFINE_VAR and u.src[1].op is Ops.CONST and \
    u.dtype == u.src[0].dtype and u.src[0].arg[1] <= u.src[1].arg <= u.src[0].arg[2]


def _numel(shape) -> int:
  n = 1
  for s in shape: n *= s
  return n


def _reduce_axis_ok(u: UOp) -> bool:
  op, axes = u.arg
  return op in GroupOp.ReduceOps and len(u.src) == 1 and u.dtype == u.src[0].dtype and \
    all(0 <= a < len(u.src[0].shape) for a in axes)


def _arange_ok(u: UOp) -> bool:
  """0 .. n-1 of an integer or float dtype, every value exact in it."""
  return u.src == () and type(u.arg) is int and u.arg >= 0 and u.dtype is not None and u.dtype.count == 1 and \
    (u.dtype.is_int or u.dtype.is_float) and u.arg - 1 <= u.dtype.exact_int_max


# what may appear in a tensor graph (before and after kernelize)
tensor_spec = PatternMatcher([
  # arg (uid, device, size): the buffer by value; the Buffer itself lives outside the graph (scheduler.buffer_of)
  (UPat(Ops.BUFFER, name="u"), lambda u: isinstance(u.arg, tuple) and len(u.arg) == 3 and isinstance(u.arg[0], int)
   and isinstance(u.arg[1], str) and isinstance(u.arg[2], int) and u.src == ()),
  (UPat(Ops.CONST, name="u"), lambda u: u.src == () and u.dtype is not None),
  (UPat(Ops.ARANGE, name="u"), _arange_ok),
  (UPat(GroupOp.Movement, name="u"), _movement_ok),
  (UPat(GroupOp.ALU, name="u"), lambda u: _alu_ok(u) and len({x.shape for x in u.src}) == 1),
  (UPat(Ops.REDUCE_AXIS, name="u"), _reduce_axis_ok),
  (UPat((Ops.CONTIGUOUS, Ops.COPY, Ops.DETACH, Ops.CONTIGUOUS_BACKWARD), name="u"),
   lambda u: len(u.src) == 1 and u.dtype == u.src[0].dtype),
  # (value, *inputs), arg (rule name, *its parameters)
  (UPat(Ops.CUSTOM_GRADIENT, name="u"), lambda u: len(u.src) >= 2 and u.dtype == u.src[0].dtype
   and isinstance(u.arg, tuple) and len(u.arg) >= 1 and isinstance(u.arg[0], str)),
  # a kernelized ASSIGN may keep a third source: the earlier pending write into its buffer, which runs first
  (UPat(Ops.ASSIGN, name="u"), lambda u: (len(u.src) == 2 or (len(u.src) == 3 and u.src[1].op is Ops.KERNEL))
   and u.src[0].shape == u.src[1].shape and u.dtype == u.src[0].dtype),
  (UPat(Ops.KERNEL, name="u"), lambda u: u.dtype is None and all(x.op in (Ops.BUFFER, Ops.ASSIGN) for x in u.src)),
  (UPat(Ops.SINK), lambda: True),
  # the symbolic ints of shapes: bound Variables and int arithmetic on them (the ALU rule above)
  (UPat(Ops.DEFINE_VAR, name="u"), _var_ok),
  (UPat(Ops.BIND, name="u"), _bind_ok),
])

def _sink_ok(u: UOp) -> bool:
  """The STOREs of a kernel write PARAMs 0..n-1 in order (n > 1: a multi-output kernel), values of one shape."""
  return len(u.src) >= 1 and all(s.op is Ops.STORE and s.src[0].op is Ops.PARAM and s.src[0].arg[0] == k
                                 for k, s in enumerate(u.src)) and len({s.src[1].shape for s in u.src}) == 1


# a kernel AST: SINK(STORE(PARAM 0, value), ..., STORE(PARAM n-1, value)) over PARAMs, constants, movement, ALU
# and reductions; every value has the same shape (the launch)
kernel_spec = PatternMatcher([
  (UPat(Ops.SINK, name="u"), _sink_ok),
  (UPat(Ops.STORE, name="u", src=(UPat(Ops.PARAM), UPat.var("v"))),
   lambda u, v: u.src[0].dtype == v.dtype and
   (_numel(v.shape) == u.src[0].arg[1] or (_symbolic(v.shape) and _numel(v.shape).vmax <= u.src[0].arg[1]))),
  (UPat(Ops.PARAM, name="u"), lambda u: u.src == () and isinstance(u.arg, tuple) and len(u.arg) in (2, 3)),
  (UPat(Ops.CONST, name="u"), lambda u: u.src == ()),
  (UPat(Ops.ARANGE, name="u"), _arange_ok),
  (UPat(GroupOp.Movement, name="u"), _movement_ok),
  (UPat(GroupOp.ALU, name="u"), lambda u: _alu_ok(u) and len({x.shape for x in u.src}) == 1),
  (UPat(Ops.REDUCE_AXIS, name="u"), _reduce_axis_ok),
  # a kernel's Variables (unbound: their values come at launch)
  (UPat(Ops.DEFINE_VAR, name="u"), _var_ok),
])


def _index_ok(i: UOp) -> bool: return i.dtype in (dtypes.int32, dtypes.int64)


def _element_ok(value, buf: UOp) -> bool:
  # a buffer's element, or a vector of its elements (read/written at consecutive indices; PARAMs only)
  return value == buf.dtype or (value is not None and value.count > 1 and buf.op is Ops.PARAM and value.scalar() == buf.dtype)


def _load_ok(u: UOp) -> bool:
  ok_buf = u.src[0].op in (Ops.PARAM, Ops.BARRIER)
  # a vector load may have one gate per lane (a masked load)
  gate_ok = len(u.src) == 2 or (len(u.src) == 3 and u.src[2].dtype in (dtypes.bool, dtypes.bool.vec(u.dtype.count)))
  return ok_buf and _index_ok(u.src[1]) and gate_ok and _element_ok(u.dtype, u.src[0])


def _store_ok(u: UOp) -> bool:
  ok_buf = u.src[0].op in (Ops.PARAM, Ops.DEFINE_LOCAL)
  # a vector store may have one gate per lane (a masked store)
  gate_ok = len(u.src) == 3 or (len(u.src) == 4 and u.src[3].dtype in (dtypes.bool, dtypes.bool.vec(u.src[2].dtype.count)))
  return ok_buf and _index_ok(u.src[1]) and gate_ok and _element_ok(u.src[2].dtype, u.src[0])


def _vectorize_ok(u: UOp) -> bool:
  return u.dtype is not None and u.dtype.count == len(u.src) > 1 and all(s.dtype == u.dtype.scalar() for s in u.src)


def _gep_ok(u: UOp) -> bool:
  if len(u.src) != 1 or u.src[0].dtype is None or u.dtype is None: return False
  v = u.src[0].dtype
  return v.count > 1 and u.dtype == v.scalar() and isinstance(u.arg, int) and 0 <= u.arg < v.count


def _wmma_ok(u: UOp) -> bool:
  """A WMMA's fragments have the lanes its TensorCore gives each thread, A and B one dtype, C and D another."""
  if len(u.src) != 3 or not isinstance(u.arg, tuple) or len(u.arg) != 6 or any(s.dtype is None for s in u.src): return False
  _, (m, n, k), threads, *_ = u.arg
  a, b, c = (s.dtype for s in u.src)
  counts = (a.count, b.count, c.count) == (m * k // threads, k * n // threads, m * n // threads)
  return counts and a.scalar() == b.scalar() and u.dtype == c


# the lowered graph: index arithmetic, loads and stores, reductions over explicit ranges
program_spec = PatternMatcher([
  (UPat(Ops.SINK, name="u"), lambda u: all(s.op is Ops.STORE for s in u.src)),
  (UPat(Ops.STORE, name="u"), _store_ok),
  (UPat(Ops.LOAD, name="u"), _load_ok),
  (UPat(Ops.PARAM, name="u"), lambda u: u.src == ()),
  (UPat(Ops.CONST, name="u"), lambda u: u.src == () and u.dtype is not None),
  # a launch index; src (size,) when its size depends on a Variable (arg then holds the largest size)
  (UPat(Ops.SPECIAL, name="u"), lambda u: _index_ok(u) and isinstance(u.arg, tuple) and len(u.arg) == 3 and
   (u.src == () or (len(u.src) == 1 and u.src[0].symbolic and u.src[0].dtype == u.dtype))),
  # an integer parameter of the kernel, given at launch
  (UPat(Ops.DEFINE_VAR, name="u"), _var_ok),
  (UPat(Ops.RANGE, name="u"), lambda u: _index_ok(u) and len(u.src) == 1 and u.src[0].dtype == u.dtype),
  (UPat(Ops.REDUCE, name="u"), lambda u: u.arg in GroupOp.ReduceOps and u.dtype == u.src[0].dtype and
   all(r.op is Ops.RANGE for r in u.src[1:])),
  (UPat(Ops.DEFINE_LOCAL, name="u"), lambda u: u.src == () and u.dtype is not None),
  (UPat(Ops.BARRIER, name="u"), lambda u: all(s.op is Ops.STORE for s in u.src)),
  (UPat(GroupOp.ALU, name="u"), _alu_ok),
  (UPat(Ops.VECTORIZE, name="u"), _vectorize_ok),
  (UPat(Ops.GEP, name="u"), _gep_ok),
  (UPat(Ops.WMMA, name="u"), _wmma_ok),
])


def check_program(prog: LoopProgram) -> None:
  """The linear program's own rules: sources come first, loops nest, and nothing a loop defines
  (but accumulators) is used after the loop ends."""
  pos = {u: i for i, u in enumerate(prog.uops)}
  if len(pos) != len(prog.uops): raise SpecError(f"{prog.name}: a UOp appears twice in the program")
  open_loops: list[UOp] = []
  scope_of: dict[UOp, tuple[UOp, ...]] = {}
  for i, u in enumerate(prog.uops):
    for s in u.src:
      if s not in pos or pos[s] >= i: raise SpecError(f"{prog.name}: %{i} {u.op} uses a value not defined before it")
      if s.op is not Ops.DEFINE_ACC and any(r not in open_loops for r in scope_of.get(s, ())):
        raise SpecError(f"{prog.name}: %{i} {u.op} uses %{pos[s]} outside the loop that defines it")
    if u.op in (Ops.REDUCE, Ops.REDUCE_AXIS) or u.op in GroupOp.Movement:
      raise SpecError(f"{prog.name}: {u.op} must not survive linearization")
    if u.op is Ops.ENDRANGE:
      if not open_loops or open_loops[-1] is not u.src[0]: raise SpecError(f"{prog.name}: loops do not nest at %{i}")
      open_loops.pop()
    scope_of[u] = tuple(open_loops)
    if u.op is Ops.RANGE: open_loops.append(u)
  if open_loops: raise SpecError(f"{prog.name}: {len(open_loops)} loop(s) never closed")
  _check_launch(prog)


def _check_launch(prog: LoopProgram) -> None:
  """Every launch index reads a dimension the program launches, with that dimension's size: a
  global index the global size, a work-group index the local size (a mismatch would silently
  compute on the wrong threads)."""
  for u in prog.uops:
    if u.op is not Ops.SPECIAL: continue
    name, dim, size = u.arg
    if name.startswith("gidx"): sizes = prog.global_size
    elif name.startswith("lidx"): sizes = prog.local_size or ()
    else: raise SpecError(f"{prog.name}: unknown launch index {name}")
    if u.src: size = u.src[0]  # a symbolic size: the program launches the same expression
    if dim >= len(sizes) or sizes[dim] is not size and sizes[dim] != size:
      raise SpecError(f"{prog.name}: launch index {name} of size {size} but the program launches "
                      f"global {prog.global_size} local {prog.local_size}")
