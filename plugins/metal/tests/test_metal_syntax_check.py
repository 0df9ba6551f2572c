"""The Linux syntax check of MSL must catch real mistakes: each planted one below is an error
Apple's compiler would also report (or, for the structure rules, a kernel Metal would refuse)."""
from __future__ import annotations

import pytest

from plugrad_metal.syntax_check import MetalSyntaxError, structure_problems

GOOD = """#include <metal_stdlib>
using namespace metal;
kernel void k(device float* data0 [[buffer(0)]], const device half* data1 [[buffer(1)]],
              uint3 gid [[thread_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  threadgroup float temp0[16];
  int gidx0 = (int)gid.x;
  int lidx0 = (int)lid.x;
  float v = (float)data1[gidx0];
  temp0[lidx0] = precise::sqrt(v) + metal::trunc(v) + as_type<float>(as_type<uint>(v));
  threadgroup_barrier(mem_flags::mem_threadgroup);
  data0[gidx0] = (temp0[0] != temp0[0] ? NAN : -INFINITY) + (float)metal::exp2((half)v);
}
"""

# name -> (a (old, new) edit of GOOD, a fragment the diagnostics must contain)
PLANTED = {
  "unknown function": (("precise::sqrt(v)", "precise::sqrtf(v)"), "no member named 'sqrtf'"),
  "unknown free function": (("metal::trunc(v)", "frobnicate(v)"), "undeclared identifier 'frobnicate'"),
  "wrong vector arity": (("int gidx0 = (int)gid.x;", "uint2 g2 = gid; int gidx0 = (int)g2.x;"),
                         "vector of 3"),
  "swizzle past the vector": (("int gidx0 = (int)gid.x;", "int gidx0 = (int)gid.w;"), "exceeds"),
  "device pointer to threadgroup pointer": (("threadgroup_barrier(mem_flags::mem_threadgroup);",
                                             "threadgroup_barrier(mem_flags::mem_threadgroup); "
                                             "threadgroup float* p = data0;"), "cannot initialize"),
  "double": (("float v = (float)data1[gidx0];", "double w = 1.0; float v = (float)data1[gidx0];"), "no_double"),
  "double promotion": (("float v = (float)data1[gidx0];", "float v = (float)data1[gidx0] * 0.5;"), "to 'double'"),
  "as_type of different sizes": (("as_type<uint>(v)", "as_type<ushort>(v)"), "same size"),
  "unknown attribute": (("[[thread_position_in_threadgroup]]", "[[thread_position_in_warp]]"), "unknown attribute"),
  "write through a const buffer": (("data0[gidx0] =", "data1[gidx0] = (half)0.0f; data0[gidx0] ="),
                                   "read-only variable is not assignable"),
  "wrong barrier flags": (("mem_flags::mem_threadgroup", "mem_flags::mem_shared"), "mem_shared"),
}


def test_good_kernel_passes(clang_checker):
  clang_checker.check(GOOD)


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_mistake_is_caught(name, clang_checker):
  (old, new), expect = PLANTED[name]
  assert old in GOOD
  bad = GOOD.replace(old, new, 1)
  with pytest.raises(MetalSyntaxError) as info:
    clang_checker.check(bad)
  diagnostics = str(info.value).split("--- source ---")[0]  # not the echoed source
  assert expect in diagnostics, str(info.value)


def test_more_than_31_buffers_is_caught(clang_checker):
  args = ", ".join(f"device float* data{i} [[buffer({i})]]" for i in range(32))
  src = f"#include <metal_stdlib>\nusing namespace metal;\nkernel void k({args}) {{\n  data0[0] = 1.0f;\n}}\n"
  with pytest.raises(MetalSyntaxError, match="binds 32 buffers; Metal allows 31"):
    clang_checker.check(src)


def test_threadgroup_array_inside_a_block_is_caught():
  src = GOOD.replace("  threadgroup float temp0[16];\n", "").replace(
    "  int lidx0 = (int)lid.x;\n",
    "  int lidx0 = (int)lid.x;\n  for (int i = 0; i < 1; i++) {\n    threadgroup float temp0[16];\n  }\n")
  assert any("kernel scope" in p for p in structure_problems(src))
  assert structure_problems(GOOD) == []


def test_command_is_strict(clang_checker):
  cmd = clang_checker.command()
  for flag in ("-std=c++17", "-fsyntax-only", "-nostdinc", "--target=arm64-apple-macos11", "-Werror",
               "-Wdouble-promotion"):
    assert flag in cmd
