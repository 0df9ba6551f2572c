// E_4_4 global=(4, 4) local=(4, 4)
static inline ushort plugrad_f32_to_half_bits(float f) { ushort h; vstore_half_rte(f, 0, (half*)&h); return h; }
static inline float plugrad_half_bits_to_f32(ushort h) { return vload_half(0, (const half*)&h); }
static inline float plugrad_round_half(float f) { return plugrad_half_bits_to_f32(plugrad_f32_to_half_bits(f)); }
__kernel void E_4_4(__global half* restrict data0, __global const half* restrict data1, __global const half* restrict data2) {
  int gidx0 = (int)(get_group_id(0) * get_local_size(0) + get_local_id(0));
  int gidx1 = (int)(get_group_id(1) * get_local_size(1) + get_local_id(1));
  int alu0 = (gidx1 * 4);
  int alu1 = (alu0 + gidx0);
  float val2 = vload_half(alu1, data1);
  float val3 = vload_half(alu1, data2);
  float alu4 = plugrad_round_half((val2 * val3));
  float alu5 = plugrad_round_half((alu4 + 1.0f));
  float alu6 = plugrad_round_half(sqrt(alu5));
  vstore_half_rte(alu6, alu1, data0);
}
