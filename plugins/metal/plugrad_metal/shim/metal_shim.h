// metal_shim.h: enough of Metal Shading Language, modelled in clang C++17, to syntax- and
// type-check the kernels plugrad renders for METAL on a machine without Apple's Metal compiler.
//
// Compile a kernel with (see plugrad_metal/syntax_check.py for the exact command):
//   clang++ -x c++ -std=c++17 -fsyntax-only -nostdinc -nostdinc++ --target=arm64-apple-macos11
//           -I <this folder>/include -Werror ...
// `#include <metal_stdlib>` finds include/metal_stdlib, which includes this file.
//
// What is modelled, and how:
// - address spaces as clang address spaces: device (1), constant (2), threadgroup (3), thread
//   (the default). Mixing them without a cast is a type error, as in MSL. A `threadgroup` array
//   is also `static`: MSL declares it at kernel scope and shares it across the threadgroup, and
//   clang rejects address-space-qualified automatic variables;
// - scalar types (uchar ... ulong, half as _Float16; MSL `long` is 64-bit, as on arm64 macOS) and
//   vector types (float2 ... ulong4) as ext_vector_type: wrong arity and out-of-range swizzles are
//   type errors;
// - attributes: every Metal attribute plugrad emits ([[buffer(n)]], [[thread_position_in_grid]],
//   ...) is a macro expanding to clang::annotate, so it is known to clang; any other attribute is
//   reported as unknown, which the check makes an error (stricter than ignoring it);
// - built-ins: as_type<T> (equal sizes enforced), the metal:: and metal::precise:: math functions
//   for float and half only, integer min/max/abs/clamp, threadgroup_barrier with mem_flags,
//   NAN/INFINITY/MAXFLOAT/HUGE_VALF. A function not declared here is an error;
// - no double: `double` is poisoned (any use is an error) and -Wdouble-promotion (made an error)
//   catches floats silently promoted by unsuffixed literals. There are no double overloads.
//
// What is NOT modelled: Metal's own semantic rules beyond types (argument-table limits are
// checked in Python by the checker; kernel-scope placement of threadgroup arrays too), texture
// and sampler types, SIMD-group functions, the exact overload set of the Metal standard library,
// and of course code generation. Only Apple's compiler on macOS proves a kernel compiles.
#pragma once

#define __METAL_VERSION__ 300

// ---------------------------------------------------------------- address spaces and qualifiers
#define device __attribute__((address_space(1)))
#define constant __attribute__((address_space(2)))
#define threadgroup static __attribute__((address_space(3)))
#define thread
#define kernel __attribute__((annotate("metal_kernel")))

// ---------------------------------------------------------------- attributes
#define buffer(n) clang::annotate("metal_buffer", n)
#define thread_position_in_grid clang::annotate("metal_thread_position_in_grid")
#define thread_position_in_threadgroup clang::annotate("metal_thread_position_in_threadgroup")
#define threadgroup_position_in_grid clang::annotate("metal_threadgroup_position_in_grid")
#define threads_per_threadgroup clang::annotate("metal_threads_per_threadgroup")
#define threads_per_grid clang::annotate("metal_threads_per_grid")
#define thread_index_in_threadgroup clang::annotate("metal_thread_index_in_threadgroup")
#define max_total_threads_per_threadgroup(n) clang::annotate("metal_max_total_threads_per_threadgroup", n)

// ---------------------------------------------------------------- no double
#define double __metal_has_no_double__

namespace metal {

// ---------------------------------------------------------------- scalar and vector types
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
typedef _Float16 half;
static_assert(sizeof(long) == 8, "MSL long is 64-bit");

#define PLUGRAD_METAL_VECTORS(T) \
  typedef T T##2 __attribute__((ext_vector_type(2))); \
  typedef T T##3 __attribute__((ext_vector_type(3))); \
  typedef T T##4 __attribute__((ext_vector_type(4)));
typedef signed char __metal_char;
typedef __metal_char char2 __attribute__((ext_vector_type(2)));
typedef __metal_char char3 __attribute__((ext_vector_type(3)));
typedef __metal_char char4 __attribute__((ext_vector_type(4)));
PLUGRAD_METAL_VECTORS(uchar)
PLUGRAD_METAL_VECTORS(short)
PLUGRAD_METAL_VECTORS(ushort)
PLUGRAD_METAL_VECTORS(int)
PLUGRAD_METAL_VECTORS(uint)
PLUGRAD_METAL_VECTORS(long)
PLUGRAD_METAL_VECTORS(ulong)
PLUGRAD_METAL_VECTORS(half)
PLUGRAD_METAL_VECTORS(float)
#undef PLUGRAD_METAL_VECTORS

// ---------------------------------------------------------------- bit casts
template <typename T, typename U> inline T as_type(U x) {
  static_assert(sizeof(T) == sizeof(U), "as_type needs a source and destination of the same size");
  return __builtin_bit_cast(T, x);
}

// ---------------------------------------------------------------- constants
#define NAN __builtin_nanf("")
#define INFINITY __builtin_inff()
#define HUGE_VALF __builtin_huge_valf()
#define MAXFLOAT 0x1.fffffep127f
#define FLT_MAX 0x1.fffffep127f
#define HALF_MAX ((half)65504.0f)

// ---------------------------------------------------------------- math (float and half only)
#define PLUGRAD_METAL_UNARY(T) \
  T sqrt(T); T rsqrt(T); T exp(T); T exp2(T); T log(T); T log2(T); T sin(T); T cos(T); T tan(T); \
  T tanh(T); T trunc(T); T floor(T); T ceil(T); T round(T); T rint(T); T fabs(T); T abs(T); T sign(T); \
  bool isnan(T); bool isinf(T); bool isfinite(T); bool signbit(T);
#define PLUGRAD_METAL_BINARY(T) \
  T pow(T, T); T powr(T, T); T fmin(T, T); T fmax(T, T); T min(T, T); T max(T, T); T fmod(T, T); \
  T copysign(T, T); T fma(T, T, T); T clamp(T, T, T); T select(T, T, bool);
PLUGRAD_METAL_UNARY(float)
PLUGRAD_METAL_UNARY(half)
PLUGRAD_METAL_BINARY(float)
PLUGRAD_METAL_BINARY(half)
namespace precise { PLUGRAD_METAL_UNARY(float) PLUGRAD_METAL_BINARY(float) }
namespace fast { PLUGRAD_METAL_UNARY(float) PLUGRAD_METAL_BINARY(float) }
#undef PLUGRAD_METAL_UNARY
#undef PLUGRAD_METAL_BINARY

#define PLUGRAD_METAL_INTEGER(T) T min(T, T); T max(T, T); T clamp(T, T, T); T select(T, T, bool);
PLUGRAD_METAL_INTEGER(__metal_char) PLUGRAD_METAL_INTEGER(uchar) PLUGRAD_METAL_INTEGER(short)
PLUGRAD_METAL_INTEGER(ushort) PLUGRAD_METAL_INTEGER(int) PLUGRAD_METAL_INTEGER(uint)
PLUGRAD_METAL_INTEGER(long) PLUGRAD_METAL_INTEGER(ulong)
#undef PLUGRAD_METAL_INTEGER
int abs(int); long abs(long); short abs(short); __metal_char abs(__metal_char);
uint popcount(uint); ulong popcount(ulong); uint clz(uint); uint ctz(uint);

// ---------------------------------------------------------------- synchronisation
enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
void threadgroup_barrier(mem_flags flags);
void simdgroup_barrier(mem_flags flags);

}  // namespace metal
