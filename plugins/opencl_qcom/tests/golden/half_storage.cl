// E_4_4 global=(16,) local=(16,)
static inline ushort plugrad_f32_to_half_bits(float f) { ushort h; vstore_half_rte(f, 0, (half*)&h); return h; }
static inline float plugrad_half_bits_to_f32(ushort h) { return vload_half(0, (const half*)&h); }
static inline float plugrad_round_half(float f) { return plugrad_half_bits_to_f32(plugrad_f32_to_half_bits(f)); }
__kernel void E_4_4(__global half* restrict data0, __global const half* restrict data1, __global const half* restrict data2) {
  int gidx0 = (int)(get_group_id(0) * get_local_size(0) + get_local_id(0));
  float val0 = vload_half(gidx0, data1);
  float val1 = vload_half(gidx0, data2);
  float alu2 = plugrad_round_half((val0 * val1));
  float alu3 = plugrad_round_half((alu2 + 1.0f));
  float alu4 = plugrad_round_half(sqrt(alu3));
  vstore_half_rte(alu4, gidx0, data0);
}
