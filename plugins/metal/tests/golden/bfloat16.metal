// kernel E_8 global=(8,) local=(8,)
#include <metal_stdlib>
using namespace metal;
inline float plugrad_bf16_to_f32(ushort x) { return as_type<float>(uint(x) << 16); }
inline ushort plugrad_f32_to_bf16(float f) { uint u = as_type<uint>(f); if ((u & 0x7fffffffu) > 0x7f800000u && (u & 0xffffu)) return ushort(0x7fc0); return ushort((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
kernel void E_8(device ushort* data0 [[buffer(0)]], const device float* data1 [[buffer(1)]], uint3 gid [[thread_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = (int)gid.x;
  float val0 = data1[gidx0];
  float alu1 = plugrad_bf16_to_f32(plugrad_f32_to_bf16(((float)(val0))));
  float alu2 = plugrad_bf16_to_f32(plugrad_f32_to_bf16((alu1 * 2.0f)));
  data0[gidx0] = plugrad_f32_to_bf16(alu2);
}
