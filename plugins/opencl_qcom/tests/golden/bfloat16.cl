// E_4_4 global=(4, 4) local=(4, 4)
static inline float plugrad_bf16_to_f32(ushort x) { return as_float(((uint)x) << 16); }
static inline ushort plugrad_f32_to_bf16(float f) { uint u = as_uint(f); if (f != f) return (ushort)0x7fc0; return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
__kernel void E_4_4(__global float* restrict data0, __global const float* restrict data1) {
  int gidx0 = (int)(get_group_id(0) * get_local_size(0) + get_local_id(0));
  int gidx1 = (int)(get_group_id(1) * get_local_size(1) + get_local_id(1));
  int alu0 = (gidx1 * 4);
  int alu1 = (alu0 + gidx0);
  float val2 = data1[alu1];
  float alu3 = plugrad_bf16_to_f32(plugrad_f32_to_bf16((float)(val2)));
  float alu4 = plugrad_bf16_to_f32(plugrad_f32_to_bf16((alu3 * 3.0f)));
  float alu5 = ((float)(alu4));
  data0[alu1] = alu5;
}
