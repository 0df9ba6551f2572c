"""The base of every C-like renderer (C, CUDA C, OpenCL C, Metal Shading Language).

A dialect is a subclass that overrides a few class attributes and methods: the kernel and buffer
qualifiers, how launch indices are read, type names, and the odd function whose name differs.
The defaults render plain C (GCC/Clang, C11) whose kernels loop over their launch indices.

The rendered kernel takes its buffers in PARAM order, named data0, data1, ...; the written ones (Param.written:
data0, or data0..data(n-1) in a kernel with n outputs) are not const.
A kernel with Variables (DEFINE_VAR) takes their values after the buffers, one `int` each named
var_NAME, in the program's order (`LoopProgram.vars`): the runtime passes the `vals` of its launch there.
"""
from __future__ import annotations

import math
from plugrad.codegen.program import LoopProgram, Param
from plugrad.codegen.renderer import Renderer
from plugrad.dtype import DType, dtypes
from plugrad.uops import GroupOp, Ops, UOp

C_TYPES: dict[DType, str] = {
  dtypes.bool: "_Bool", dtypes.int8: "signed char", dtypes.int16: "short", dtypes.int32: "int", dtypes.int64: "long long",
  dtypes.uint8: "unsigned char", dtypes.uint16: "unsigned short", dtypes.uint32: "unsigned int",
  dtypes.uint64: "unsigned long long", dtypes.float16: "_Float16", dtypes.bfloat16: "unsigned short",
  dtypes.float32: "float", dtypes.float64: "double",
}


class CStyleRenderer(Renderer):
  """Renders a LoopProgram as C-family source. Override in a dialect:

  - `kernel_prefix`, `buffer_prefix`, `restrict`: qualifiers of the kernel and its buffer params;
  - `launch_as_loops`: True when the device has no launch dimensions (SPECIALs become loops);
  - `types`: the C name of each dtype; `bf16_storage`: bfloat16 kept as 16-bit storage and
    computed as float (dialects with a native bfloat16 type set it False); `bf16_round`: the opening of the
    expression that rounds a float to bfloat16 and back (closed by two parentheses);
  - `render_special`, `render_param`, `render_var_param`, `render_signature`, `render_cast`, `render_bitcast`,
    `render_math` and `prelude` for what differs more deeply.
  """
  kernel_prefix = ""
  buffer_prefix = ""
  restrict = "restrict "
  launch_as_loops = True
  bf16_storage = True
  bf16_round = "plugrad_bf16_to_f32(plugrad_f32_to_bf16("  # the BF16_HELPERS_C functions the prelude adds
  half_storage = False  # True: half is storage only (loads convert to float), for devices without half arithmetic
  types: dict[DType, str] = C_TYPES
  float_suffix = {dtypes.float32: "f", dtypes.float16: "", dtypes.float64: "", dtypes.bfloat16: "f"}

  # ---------------------------------------------------------------- names and types

  def ctype(self, dtype: DType) -> str:
    """The type a value of `dtype` is held in while computing."""
    if dtype.count > 1: return self.vector_type(dtype)
    if dtype == dtypes.bfloat16 and self.bf16_storage: return self.types[dtypes.float32]
    if dtype == dtypes.float16 and self.half_storage: return self.types[dtypes.float32]
    return self.types[dtype]

  def storage_type(self, dtype: DType) -> str:
    """The element type of a buffer of `dtype`."""
    return self.types[dtype]

  def render_const(self, value, dtype: DType) -> str:
    if dtype == dtypes.bool: return "1" if value else "0"
    if dtype.is_float:
      if math.isnan(value): return self.render_nan(dtype)
      if math.isinf(value): return ("-" if value < 0 else "") + self.render_inf(dtype)
      ct = self.ctype(dtype)
      if dtype in (dtypes.float32,) or (dtype == dtypes.bfloat16 and self.bf16_storage) or \
         (dtype == dtypes.float16 and self.half_storage): return f"{float(value)!r}f"
      if dtype == dtypes.float64: return f"{float(value)!r}"
      return f"(({ct}){float(value)!r}f)"
    if dtype == dtypes.int64: return f"{int(value)}ll" if value != -2**63 else "(-9223372036854775807ll-1)"
    if dtype == dtypes.uint64: return f"{int(value)}ull"
    if dtype == dtypes.uint32: return f"{int(value)}u"
    if dtype == dtypes.int32 and value == -2**31: return "(-2147483647-1)"
    return f"(({self.ctype(dtype)}){int(value)})" if dtype.itemsize < 4 else str(int(value))

  def render_nan(self, dtype: DType) -> str: return f"(({self.ctype(dtype)})NAN)"
  def render_inf(self, dtype: DType) -> str: return f"(({self.ctype(dtype)})INFINITY)"

  # ---------------------------------------------------------------- pieces a dialect overrides

  def prelude(self, prog: LoopProgram) -> list[str]:
    """Lines before the kernel (includes, helper functions)."""
    lines = ["#include <math.h>", "#include <string.h>"]
    if self.bf16_storage and any(u.dtype is not None and u.dtype.scalar() == dtypes.bfloat16 for u in prog.uops):
      lines += BF16_HELPERS_C
    return lines

  def render_param(self, p: Param) -> str:
    const = "" if p.written else "const "
    return f"{self.buffer_prefix}{const}{self.storage_type(p.dtype)}* {self.restrict}data{p.index}"

  def render_var_param(self, var: UOp, position: int) -> str:
    """The kernel parameter holding a Variable's value; `position` counts every parameter before it."""
    return f"const int {var_name(var)}"

  def render_params(self, prog: LoopProgram) -> list[str]:
    """The buffer parameters, then one per Variable."""
    return [self.render_param(p) for p in prog.params] + \
      [self.render_var_param(v, len(prog.params) + i) for i, v in enumerate(prog.vars)]

  def render_signature(self, prog: LoopProgram) -> str:
    return f"{self.kernel_prefix}void {prog.name}({', '.join(self.render_params(prog))})"

  def render_special(self, u: UOp, prog: LoopProgram) -> str:
    """The statement defining a launch index on a device with launch dimensions."""
    raise NotImplementedError(f"{type(self).__name__} must render launch indices (or set launch_as_loops)")

  def render_define_local(self, name: str, dtype: DType, size: int) -> str:
    """The declaration of work-group shared memory (at kernel scope)."""
    raise NotImplementedError(f"{type(self).__name__} has no work-group memory (set Capabilities.local_memory to 0)")

  def render_barrier(self) -> str:
    """A work-group barrier for shared memory."""
    raise NotImplementedError(f"{type(self).__name__} has no work-group barrier")

  def render_loop(self, var: str, end: str, dtype: DType) -> str:
    return f"for ({self.ctype(dtype)} {var} = 0; {var} < {end}; {var}++) {{"

  # ---------------------------------------------------------------- vectors and tensor cores (dialects that take them)

  def vector_type(self, dtype: DType) -> str:
    """The type of a vector value (a WMMA's fragments, on a device with tensor cores)."""
    raise NotImplementedError(f"{type(self).__name__} has no vector types ({dtype})")

  def render_vectorize(self, srcs: list[str], dtype: DType) -> str:
    """A vector of the lanes `srcs`."""
    raise NotImplementedError(f"{type(self).__name__} cannot render VECTORIZE")

  def render_gep(self, x: str, lane: int, dtype: DType) -> str:
    """Lane `lane` of the vector `x` of `dtype`."""
    raise NotImplementedError(f"{type(self).__name__} cannot render GEP")

  def render_wmma(self, arg: tuple, a: str, b: str, c: str, dtypes_in: tuple[DType, DType, DType]) -> str:
    """The tensor core `arg` (`TensorCore.wmma_arg()`) on the fragments a, b, c: the D fragment."""
    raise NotImplementedError(f"{type(self).__name__} has no tensor cores")

  def render_cast(self, x: str, dtype: DType, src: DType) -> str:
    if dtype == dtypes.bool: return f"({x} != 0)"
    return f"(({self.ctype(dtype)})({x}))"

  def render_bitcast(self, x: str, dtype: DType, src: DType) -> str:
    if self.bf16_storage and dtypes.bfloat16 in (dtype, src):
      # bfloat16 is held as a float while computing: through its 16 storage bits (reinterpreting the float's own
      # bytes copied 4 bytes into or out of a 2-byte variable: bitcasts to and from int16 read 0)
      if src == dtypes.bfloat16: x, src = f"plugrad_f32_to_bf16({x})", dtypes.uint16
      if dtype == dtypes.bfloat16: return f"plugrad_bf16_to_f32({self.render_bitcast(x, dtypes.uint16, src)})"
      if dtype == dtypes.uint16: return x
    # GCC/Clang statement expression with memcpy: the portable way to reinterpret bits in C
    return f"({{ {self.ctype(src)} _s = {x}; {self.ctype(dtype)} _d; memcpy(&_d, &_s, sizeof(_d)); _d; }})"

  def render_math(self, op: Ops, x: str, dtype: DType) -> str:
    """sqrt, exp2, log2, sin, cos and trunc; C picks the float or double function by suffix."""
    name = {Ops.SQRT: "sqrt", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.COS: "cos",
            Ops.TRUNC: "trunc"}[op]
    return f"{name}{'f' if self.ctype(dtype) == 'float' else ''}({x})"

  def round_storage(self, expr: str, op: Ops, dtype: DType) -> str:
    """`expr` rounded to bfloat16 when bfloat16 is only storage here (computed in a float): the reference
    rounds after every op (a cast to bfloat16 included), so a fused kernel must too. Ops whose result is one
    of their bfloat16 operands are left alone, and so is a bitcast (16 bits read as a bfloat16 are one: rounding them
    again would only change a NaN's bits) and an expression a dialect's render_alu already rounded."""
    if dtype.scalar() != dtypes.bfloat16 or not self.bf16_storage: return expr
    return expr if op in (Ops.WHERE, Ops.MAX, Ops.MIN, Ops.NEG, Ops.BITCAST) else self.render_bf16_round(expr)

  def render_bf16_round(self, x: str) -> str:
    """A float expression rounded to the nearest bfloat16 (nearest even), still a float, through `bf16_round`."""
    return x if x.startswith(self.bf16_round) else f"{self.bf16_round}{x}))"

  def render_float_divmod(self, op: Ops, a: str, b: str, dtype: DType) -> str:
    """Float IDIV (trunc(a / b)) and MOD (C's fmod). fmod is computed in float or double, where it is
    exact, and cast back, so half operands work in every dialect and no double leaks into the
    surrounding float expression (C's fmod returns double)."""
    ct = self.ctype(dtype)
    wide = "double" if dtype == dtypes.float64 else "float"
    if op is Ops.IDIV: return self.render_math(Ops.TRUNC, f"(({ct})({a} / {b}))", dtype)
    return f"(({ct})fmod(({wide})({a}), ({wide})({b})))"

  def render_int_abs(self, x: str, dtype: DType) -> str | None:
    """|x| of a signed integer, for a dialect whose toolchains need a builtin instead of the select
    `x < 0 ? -x : x` (C compilers turn that select into an intrinsic some runtimes cannot load).
    None, the default, keeps the select."""
    return None

  def render_load(self, buf: str, idx: str, dtype: DType) -> str:
    if dtype == dtypes.bfloat16 and self.bf16_storage: return f"plugrad_bf16_to_f32({buf}[{idx}])"
    return f"{buf}[{idx}]"

  def render_store(self, buf: str, idx: str, value: str, dtype: DType) -> str:
    if dtype == dtypes.bfloat16 and self.bf16_storage: return f"{buf}[{idx}] = plugrad_f32_to_bf16({value});"
    return f"{buf}[{idx}] = {value};"

  # ---------------------------------------------------------------- ALU

  def render_wrapping(self, op: Ops, srcs: list[str], dtype: DType) -> str:
    """Integer + - *, negation and left shift that wrap, as plugrad's integers do: computed in the unsigned type of
    the value's size (at least an int's). C leaves signed overflow undefined and compilers assume it never happens
    (pocl's clang took x + x + x < 0 for x < 0); small types promote to a signed int, which uint16 * uint16
    overflows."""
    wide = self.types[dtypes.uint64 if dtype.itemsize == 8 else dtypes.uint32]
    a = f"(({wide}){srcs[0]})"
    if op is Ops.NEG: value = f"(-{a})"
    elif op is Ops.SHL: value = f"({a} << ({srcs[1]} & {dtype.itemsize * 8 - 1}))"
    else: value = f"({a} {_WRAPPING[op]} (({wide}){srcs[1]}))"
    return f"(({self.ctype(dtype)}){value})"

  def render_alu(self, op: Ops, srcs: list[str], dtype: DType, src_dtypes: list[DType], const_srcs: list[UOp | None]) -> str:
    a = srcs[0]
    if op is Ops.CAST: return self.render_cast(a, dtype, src_dtypes[0])
    if op is Ops.BITCAST: return self.render_bitcast(a, dtype, src_dtypes[0])
    if op in (Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.COS, Ops.TRUNC): return self.render_math(op, a, dtype)
    if op is Ops.NEG: return f"(!{a})" if dtype == dtypes.bool else f"(-{a})"
    if op is Ops.RECIP: return f"(({self.ctype(dtype)})1/{a})"
    if op is Ops.WHERE: return f"({a} ? {srcs[1]} : {srcs[2]})"
    b = srcs[1]
    if op in (Ops.IDIV, Ops.MOD) and dtype.is_float: return self.render_float_divmod(op, a, b, dtype)
    if op in (Ops.IDIV, Ops.MOD):
      sym = "/" if op is Ops.IDIV else "%"
      divisor = const_srcs[1]
      if divisor is not None and divisor.arg not in (0, -1): return f"({a} {sym} {b})"
      # x/0 is 0 by definition, and INT_MIN/-1 would trap: guard both
      return f"({b} == 0 ? ({self.ctype(dtype)})0 : {b} == -1 ? ({self.ctype(dtype)})({'-' if sym == '/' else '0*'}{a}) : {a} {sym} {b})" \
        if not src_dtypes[1].is_unsigned else f"({b} == 0 ? ({self.ctype(dtype)})0 : {a} {sym} {b})"
    if op in (Ops.MAX, Ops.MIN):
      cmp = ">" if op is Ops.MAX else "<"
      if dtype.is_float: return f"(({a} != {a} || {a} {cmp} {b}) ? {a} : {b})"  # NaN wins, like numpy
      return f"({a} {cmp} {b} ? {a} : {b})"
    if op in (Ops.SHL, Ops.SHR):
      mask = dtype.itemsize * 8 - 1
      return f"(({self.ctype(dtype)})({a} {'<<' if op is Ops.SHL else '>>'} ({b} & {mask})))"
    if dtype == dtypes.bool and op in (Ops.ADD, Ops.MUL): return f"({a} {'|' if op is Ops.ADD else '&'} {b})"
    sym = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.FDIV: "/", Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "==",
           Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^"}[op]
    if dtype.is_int and dtype.itemsize < 4 and op in (Ops.ADD, Ops.SUB, Ops.MUL):
      return f"(({self.ctype(dtype)})({a} {sym} {b}))"  # small ints promote to int in C: wrap back
    return f"({a} {sym} {b})"

  # ---------------------------------------------------------------- the kernel

  def render(self, prog: LoopProgram) -> str:
    names: dict[UOp, str] = {}
    body: list[str] = []
    depth = 1
    counter = 0

    def line(s: str) -> None: body.append("  " * depth + s)

    wrapping = wrapping_int_ops(prog)
    into_acc = wmma_into_accumulators(prog)
    specials = [u for u in prog.uops if u.op is Ops.SPECIAL]
    # with hardware launch indices a symbolic launch size (a SPECIAL's src) is the runtime's business, not code
    skip = set() if self.launch_as_loops else launch_size_only(prog)
    loops_open = 0
    for u in prog.uops:
      if u in skip: continue
      op = u.op
      if op is Ops.PARAM: names[u] = f"data{u.arg[0]}"
      elif op is Ops.DEFINE_VAR: names[u] = var_name(u)
      elif op is Ops.CONST: names[u] = self.render_const(u.arg, u.dtype)
      elif op is Ops.SPECIAL:
        names[u] = u.arg[0]
        if not self.launch_as_loops: line(self.render_special(u, prog))
        elif u is specials[-1]:
          # open the launch loops outermost (highest dim) first, for locality and for Capabilities.ordered_launch
          for s in sorted(specials, key=lambda s: -s.arg[1]):
            line(self.render_loop(s.arg[0], names[s.src[0]] if s.src else str(s.arg[2]), s.dtype))
            depth += 1
            loops_open += 1
      elif op is Ops.RANGE:
        names[u] = f"ridx{u.arg}"
        line(self.render_loop(names[u], names[u.src[0]], u.dtype))
        depth += 1
      elif op is Ops.ENDRANGE:
        depth -= 1
        line("}")
      elif op is Ops.DEFINE_ACC:
        names[u] = f"acc{u.arg}"
        line(f"{self.ctype(u.dtype)} {names[u]} = {names[u.src[0]]};")
      elif op is Ops.ACCUMULATE and u.src[1] in into_acc:  # acc += A·B as one D = A·B + C with C the accumulator
        w = u.src[1]
        acc = names[u.src[0]]
        line(f"{acc} = {self.render_wmma(w.arg, names[w.src[0]], names[w.src[1]], acc, tuple(s.dtype for s in w.src))};")
      elif op is Ops.ACCUMULATE:
        acc, val = names[u.src[0]], names[u.src[1]]
        expr = self.render_wrapping(u.arg, [acc, val], u.dtype) if u in wrapping else \
          self.render_alu(u.arg, [acc, val], u.dtype, [u.dtype, u.dtype], [None, None])
        line(f"{acc} = {self.round_storage(expr, u.arg, u.dtype)};")
      elif op is Ops.DEFINE_LOCAL:
        names[u] = f"temp{u.arg[0]}"
        line(self.render_define_local(names[u], u.dtype, u.arg[1]))
      elif op is Ops.BARRIER:
        names[u] = names[u.src[0].src[0]]  # reading from a barrier reads the local buffer behind it
        line(self.render_barrier())
      elif op is Ops.LOAD and u.src[0].op is Ops.BARRIER:
        names[u] = f"val{counter}"
        counter += 1
        line(f"{self.ctype(u.dtype)} {names[u]} = {names[u.src[0]]}[{names[u.src[1]]}];")
      elif op is Ops.STORE and u.src[0].op is Ops.DEFINE_LOCAL:
        st = f"{names[u.src[0]]}[{names[u.src[1]]}] = {names[u.src[2]]};"
        line(st if len(u.src) == 3 else f"if ({names[u.src[3]]}) {{ {st} }}")
      elif op is Ops.LOAD:
        load = self.render_load(names[u.src[0]], names[u.src[1]], u.dtype)
        names[u] = f"val{counter}"
        counter += 1
        expr = load if len(u.src) == 2 else f"({names[u.src[2]]} ? {load} : {self.render_const(0, u.dtype)})"
        line(f"{self.ctype(u.dtype)} {names[u]} = {expr};")
      elif op is Ops.STORE:
        st = self.render_store(names[u.src[0]], names[u.src[1]], names[u.src[2]], u.src[0].dtype)
        line(st if len(u.src) == 3 else f"if ({names[u.src[3]]}) {{ {st} }}")
      elif op is Ops.VECTORIZE:
        names[u] = f"vec{counter}"
        counter += 1
        line(f"{self.ctype(u.dtype)} {names[u]} = {self.render_vectorize([names[s] for s in u.src], u.dtype)};")
      elif op is Ops.GEP: names[u] = self.render_gep(names[u.src[0]], u.arg, u.src[0].dtype)
      elif op is Ops.WMMA:
        if u in into_acc: continue  # rendered with its ACCUMULATE
        names[u] = f"wmma{counter}"
        counter += 1
        line(f"{self.ctype(u.dtype)} {names[u]} = "
             f"{self.render_wmma(u.arg, *(names[s] for s in u.src), tuple(s.dtype for s in u.src))};")
      elif op in GroupOp.ALU:
        srcs = [names[s] for s in u.src]
        consts = [s if s.op is Ops.CONST else None for s in u.src]
        expr = None
        if op is Ops.WHERE and (idiom := int_abs_idiom(u)) is not None:
          if (expr := self.render_int_abs(names[idiom[0]], u.dtype)) is not None and idiom[1]: expr = f"(-{expr})"
        if expr is None and u in wrapping: expr = self.render_wrapping(op, srcs, u.dtype)
        if expr is None: expr = self.render_alu(op, srcs, u.dtype, [s.dtype for s in u.src], consts)
        expr = self.round_storage(expr, op, u.dtype)
        names[u] = f"alu{counter}"
        counter += 1
        line(f"{self.ctype(u.dtype)} {names[u]} = {expr};")
      else:
        raise NotImplementedError(f"{type(self).__name__} cannot render {op}")
    for _ in range(loops_open):
      depth -= 1
      line("}")
    return "\n".join(self.prelude(prog) + [self.render_signature(prog) + " {"] + body + ["}"]) + "\n"


_WRAPPING = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*"}


def wrapping_int_ops(prog: LoopProgram) -> set[UOp]:
  """The integer + - *, negations and left shifts (sums and products accumulated too) of data: values computed from
  what a kernel loads, which may overflow and must wrap. Index arithmetic (from launch indices, loop variables,
  constants and Variables) cannot overflow, since the lowering picks an index type that holds every index: it keeps
  C's signed arithmetic, whose no-overflow promise lets the compiler simplify addresses."""
  data: set[UOp] = set()
  out: set[UOp] = set()
  for u in prog.uops:
    if u.op in (Ops.LOAD, Ops.DEFINE_ACC) or any(s in data for s in u.src): data.add(u)
    if u not in data or u.dtype is None or not u.dtype.is_int or u.dtype == dtypes.bool or u.dtype.count > 1: continue
    op = u.arg if u.op is Ops.ACCUMULATE else u.op
    if op in (Ops.NEG, Ops.SHL) or op in _WRAPPING: out.add(u)
  return out


def wmma_into_accumulators(prog: LoopProgram) -> set[UOp]:
  """The WMMAs with C = 0 whose one use is an accumulator's sum (acc += A·B, as the lowering writes a tensor core's
  loop): rendered as the one instruction D = A·B + C with the accumulator for C and D."""
  uses: dict[UOp, int] = {}
  for u in prog.uops:
    for s in u.src: uses[s] = uses.get(s, 0) + 1
  return {u.src[1] for u in prog.uops if u.op is Ops.ACCUMULATE and u.arg is Ops.ADD and u.src[1].op is Ops.WMMA
          and uses[u.src[1]] == 1 and _zero_vector(u.src[1].src[2])}


def _zero_vector(u: UOp) -> bool:
  return u.op is Ops.VECTORIZE and all(s.op is Ops.CONST and s.arg == 0 for s in u.src)


def launch_size_only(prog: LoopProgram) -> set[UOp]:
  """The ALU nodes whose only use is a symbolic launch size (a SPECIAL's src), transitively."""
  users: dict[UOp, list[UOp]] = {u: [] for u in prog.uops}
  for u in prog.uops:
    for s in u.src: users[s].append(u)
  only: set[UOp] = set()
  for u in reversed(prog.uops):
    if u.op in GroupOp.ALU and users[u] and all(v.op is Ops.SPECIAL or v in only for v in users[u]): only.add(u)
  return only


def var_name(var: UOp) -> str:
  """The C name of a Variable's parameter (prefixed, so no name a user picks clashes with the kernel's own)."""
  return f"var_{var.arg[0]}"


def int_abs_idiom(u: UOp) -> tuple[UOp, bool] | None:
  """(x, negated) when the signed-integer WHERE `u` computes |x| (negated: -|x|) for every x, as
  `x < c ? -x : x` (c = 0 or 1) and `x > c ? x : -x` (c = 0 or -1) do, with either arm order."""
  cond, t, f = u.src
  if not (u.dtype.is_int and not u.dtype.is_unsigned) or cond.op is not Ops.CMPLT: return None
  if t.op is Ops.NEG and t.src[0] is f: x, neg_when_true = f, True
  elif f.op is Ops.NEG and f.src[0] is t: x, neg_when_true = t, False
  else: return None
  lhs, rhs = cond.src
  if lhs is x and rhs.op is Ops.CONST and rhs.arg in (0, 1): return x, not neg_when_true  # x < c: negative side true
  if rhs is x and lhs.op is Ops.CONST and lhs.arg in (0, -1): return x, neg_when_true  # c < x: negative side false
  return None


# bfloat16 as 16 bits of storage: the upper half of a float32, rounded to nearest even on the way in (a NaN with bits
# in the lower half becomes the quiet NaN; one without, such as a bitcast's, keeps its bits: plugrad.dtype.f32_to_bf16)
BF16_HELPERS_C = [
  "static inline float plugrad_bf16_to_f32(unsigned short x) { unsigned int u = ((unsigned int)x) << 16; float f; "
  "memcpy(&f, &u, 4); return f; }",
  "static inline unsigned short plugrad_f32_to_bf16(float f) { unsigned int u; memcpy(&u, &f, 4); "
  "if (f != f && (u & 0xffff)) return 0x7fc0; return (unsigned short)((u + 0x7fff + ((u >> 16) & 1)) >> 16); }",
]

__all__ = ["CStyleRenderer", "C_TYPES", "BF16_HELPERS_C", "int_abs_idiom", "var_name", "launch_size_only"]
