"""What a kernel's object file may call besides itself, and where those symbols come from.

LLVM lowers a few conversions to calls into the compiler's runtime library instead of inline
instructions: `double -> half` always on x86-64, and every `half <-> float` conversion on a CPU
without F16C. Those helpers (`__truncdfhf2`, `__truncsfhf2`, `__extendhfsf2`) live in libgcc or
compiler-rt, which a Python process has loaded only if some other library pulled it in, and MCJIT
resolves an unknown symbol to address 0: the kernel jumps into nothing. So this module

- implements those helpers itself, in integer LLVM IR (rounding to nearest even, NaN stays NaN),
  and registers them with LLVM once per process where the process lacks them, and
- lists the undefined symbols of every object file before it is loaded: one that the process
  cannot resolve is a CompileError naming it, at load, never a crash at the first launch.
"""
from __future__ import annotations

import struct
import threading

from plugrad.plugin import CompileError

# symbols the linker or MCJIT itself supplies, never looked up in the process
_LINKER_SYMBOLS = frozenset({"_GLOBAL_OFFSET_TABLE_"})

def _trunc_to_half(name: str, fty: str, ity: str, bits: int, mant: int, bias: int) -> str:
  """IR of `name`: a float of type `fty` (`bits` wide, `mant` mantissa bits, exponent `bias`) to half,
  rounded once to nearest even. Values in half's normal range round by integer arithmetic on the bits;
  subnormals by adding a magic number that puts half's subnormal unit in the last place of the
  mantissa, so the FPU's own rounding does the work; NaN stays NaN (quiet), overflow is infinity."""
  drop = mant - 10  # mantissa bits half does not keep
  sign = -(1 << (bits - 1))
  infinity = ((1 << (bits - 1 - mant)) - 1) << mant  # exponent all ones
  big = (bias + 16) << mant  # 65536: from here (65520 after rounding) the result is infinity
  small = (bias - 14) << mant  # half's smallest normal, 2**-14
  magic = (bias - 15 + drop + 1) << mant  # its last mantissa place is half's subnormal unit, 2**-24
  rebias = ((15 - bias) << mant) + (1 << (drop - 1)) - 1  # new exponent bias, plus just under half an ulp
  # LLVM writes a float constant of either width as the hex of its double
  magic_lit = "0x" + struct.pack(">d", struct.unpack(">d" if bits == 64 else ">f", magic.to_bytes(bits // 8, "big"))[0]).hex().upper()
  return f"""\
define half @{name}({fty} %x) {{
  %u = bitcast {fty} %x to {ity}
  %sign = and {ity} %u, {sign}
  %a = and {ity} %u, {~sign}
  %nan = icmp ugt {ity} %a, {infinity}
  %big = icmp uge {ity} %a, {big}
  %infnan = select i1 %nan, {ity} 32256, {ity} 31744
  %small = icmp ult {ity} %a, {small}
  %af = bitcast {ity} %a to {fty}
  %d = fadd {fty} %af, {magic_lit}
  %du = bitcast {fty} %d to {ity}
  %sub = sub {ity} %du, {magic}
  %odd0 = lshr {ity} %a, {drop}
  %odd = and {ity} %odd0, 1
  %n0 = add {ity} %a, {rebias}
  %n1 = add {ity} %n0, %odd
  %norm = lshr {ity} %n1, {drop}
  %fin = select i1 %small, {ity} %sub, {ity} %norm
  %h0 = select i1 %big, {ity} %infnan, {ity} %fin
  %s16 = lshr {ity} %sign, {bits - 16}
  %h1 = or {ity} %h0, %s16
  %h = trunc {ity} %h1 to i16
  %r = bitcast i16 %h to half
  ret half %r
}}
"""


_HELPERS_IR = _trunc_to_half("__truncsfhf2", "float", "i32", 32, 23, 127) + "\n" + \
  _trunc_to_half("__truncdfhf2", "double", "i64", 64, 52, 1023) + """
define float @__extendhfsf2(half %x) {
  %h16 = bitcast half %x to i16
  %h = zext i16 %h16 to i32
  %m = and i32 %h, 32767
  %o0 = shl i32 %m, 13
  %exp = and i32 %o0, 260046848
  %o1 = add i32 %o0, 939524096
  %special = icmp eq i32 %exp, 260046848
  %o2 = add i32 %o1, 939524096
  %zero = icmp eq i32 %exp, 0
  %o3 = add i32 %o1, 8388608
  %o3f = bitcast i32 %o3 to float
  %o4f = fsub float %o3f, 0x3F10000000000000
  %o4 = bitcast float %o4f to i32
  %t = select i1 %zero, i32 %o4, i32 %o1
  %v = select i1 %special, i32 %o2, i32 %t
  %s = and i32 %h, 32768
  %s32 = shl i32 %s, 16
  %r0 = or i32 %v, %s32
  %r = bitcast i32 %r0 to float
  ret float %r
}
"""
HELPERS = ("__truncsfhf2", "__truncdfhf2", "__extendhfsf2")

_lock = threading.Lock()
_engine = None  # keeps the helpers' machine code alive for the life of the process


def undefined_symbols(obj: bytes) -> list[str] | None:
  """The undefined symbols of an ELF64 little-endian object file; None for another format (the
  check is then left to the loader)."""
  if obj[:4] != b"\x7fELF" or len(obj) < 64 or obj[4] != 2 or obj[5] != 1: return None
  (shoff,) = struct.unpack_from("<Q", obj, 0x28)
  shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
  sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize) for i in range(shnum)]
  names: list[str] = []
  for _, sh_type, _, _, offset, size, link, _, _, entsize in sections:
    if sh_type != 2 or not entsize: continue  # SHT_SYMTAB
    strtab = sections[link][4]
    for j in range(size // entsize):
      st_name, _, _, st_shndx, _, _ = struct.unpack_from("<IBBHQQ", obj, offset + j * entsize)
      if st_shndx == 0 and st_name:  # SHN_UNDEF
        start = strtab + st_name
        names.append(obj[start:obj.index(b"\0", start)].decode())
  return names


def install_helpers(llvm, jit_target_machine) -> None:
  """Compile the conversion helpers and register them with LLVM's symbol table, once per process,
  for every one the process does not already provide. `jit_target_machine()` builds the host's
  target machine for MCJIT."""
  global _engine
  with _lock:
    if _engine is not None: return
    mod = llvm.parse_assembly(_HELPERS_IR)
    mod.verify()
    engine = llvm.create_mcjit_compiler(mod, jit_target_machine())
    engine.finalize_object()
    for name in HELPERS:
      if not llvm.address_of_symbol(name): llvm.add_symbol(name, engine.get_function_address(name))
    _engine = engine


def check_symbols(llvm, obj: bytes, kernel: str) -> None:
  """Raise CompileError naming every symbol `obj` calls that nothing in this process defines."""
  missing = [s for s in undefined_symbols(obj) or () if s not in _LINKER_SYMBOLS and not llvm.address_of_symbol(s)]
  if missing:
    raise CompileError(f"CPU kernel {kernel} calls {', '.join(missing)}, which nothing in this process defines "
                       f"(a runtime-library helper LLVM emitted that plugrad-cpu-llvm does not provide): "
                       f"please report it with the kernel's DEBUG=4 source")
