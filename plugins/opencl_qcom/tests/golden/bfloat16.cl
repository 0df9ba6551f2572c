// E_4_4 global=(16,) local=(16,)
static inline float plugrad_bf16_to_f32(ushort x) { return as_float(((uint)x) << 16); }
static inline ushort plugrad_f32_to_bf16(float f) { uint u = as_uint(f); if (f != f && (u & 0xffffu)) return (ushort)0x7fc0; return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
__kernel void E_4_4(__global float* restrict data0, __global const float* restrict data1) {
  int gidx0 = (int)(get_group_id(0) * get_local_size(0) + get_local_id(0));
  float val0 = data1[gidx0];
  float alu1 = plugrad_bf16_to_f32(plugrad_f32_to_bf16((float)(val0)));
  float alu2 = plugrad_bf16_to_f32(plugrad_f32_to_bf16((alu1 * 3.0f)));
  float alu3 = ((float)(alu2));
  data0[gidx0] = alu3;
}
