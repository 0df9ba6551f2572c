// r_2_3 global=(6,) local=(6,)
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
__constant sampler_t plugrad_smp = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP | CLK_FILTER_NEAREST;
static inline float plugrad_channel(float4 p, int c) { return c < 2 ? (c == 0 ? p.x : p.y) : (c == 2 ? p.z : p.w); }
static inline float plugrad_read_image(read_only image2d_t img, int i, int w) {
  return plugrad_channel(read_imagef(img, plugrad_smp, (int2)((i >> 2) % w, (i >> 2) / w)), i & 3);
}
__kernel void r_2_3(__global half* restrict data0, read_only image2d_t data1) {
  int gidx0 = (int)(get_group_id(0) * get_local_size(0) + get_local_id(0));
  int alu0 = (gidx0 * 4);
  half val1 = ((half)plugrad_read_image(data1, (int)(alu0), 3));
  float alu2 = ((float)(val1));
  int alu3 = (alu0 + 1);
  half val4 = ((half)plugrad_read_image(data1, (int)(alu3), 3));
  float alu5 = ((float)(val4));
  float alu6 = (alu2 + alu5);
  int alu7 = (alu0 + 2);
  half val8 = ((half)plugrad_read_image(data1, (int)(alu7), 3));
  float alu9 = ((float)(val8));
  float alu10 = (alu6 + alu9);
  int alu11 = (alu0 + 3);
  half val12 = ((half)plugrad_read_image(data1, (int)(alu11), 3));
  float alu13 = ((float)(val12));
  float alu14 = (alu10 + alu13);
  half alu15 = ((half)(alu14));
  data0[gidx0] = alu15;
}
