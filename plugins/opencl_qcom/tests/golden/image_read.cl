// E_4_3_5 global=(15, 4) local=(15, 4)
__constant sampler_t plugrad_smp = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP | CLK_FILTER_NEAREST;
static inline float plugrad_channel(float4 p, int c) { return c < 2 ? (c == 0 ? p.x : p.y) : (c == 2 ? p.z : p.w); }
static inline float plugrad_read_image(read_only image2d_t img, int i, int w) {
  return plugrad_channel(read_imagef(img, plugrad_smp, (int2)((i >> 2) % w, (i >> 2) / w)), i & 3);
}
__kernel void E_4_3_5(__global float* restrict data0, read_only image2d_t data1) {
  int gidx0 = (int)(get_group_id(0) * get_local_size(0) + get_local_id(0));
  int gidx1 = (int)(get_group_id(1) * get_local_size(1) + get_local_id(1));
  int alu0 = (gidx1 * 15);
  int alu1 = (alu0 + gidx0);
  int alu2 = (gidx0 * 4);
  int alu3 = (alu2 + gidx1);
  float val4 = plugrad_read_image(data1, (int)(alu3), 5);
  float alu5 = (val4 * 2.0f);
  data0[alu1] = alu5;
}
