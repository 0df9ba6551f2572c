// E_4_8 global=(32,) local=(32,)
__kernel void E_4_8(__global float* restrict data0, __global const float* restrict data1, __global const float* restrict data2) {
  int gidx0 = (int)(get_group_id(0) * get_local_size(0) + get_local_id(0));
  float val0 = data1[gidx0];
  float val1 = data2[gidx0];
  float alu2 = (val0 + val1);
  float alu3 = (alu2 * 2.0f);
  bool alu4 = (alu3 < 0.0f);
  float alu5 = (alu4 ? 0.0f : alu3);
  data0[gidx0] = alu5;
}
