// E_4_8 global=(8, 4) local=(8, 4)
__kernel void E_4_8(__global float* restrict data0, __global const float* restrict data1, __global const float* restrict data2) {
  int gidx0 = (int)(get_group_id(0) * get_local_size(0) + get_local_id(0));
  int gidx1 = (int)(get_group_id(1) * get_local_size(1) + get_local_id(1));
  int alu0 = (gidx1 * 8);
  int alu1 = (alu0 + gidx0);
  float val2 = data1[alu1];
  float val3 = data2[alu1];
  float alu4 = (val2 + val3);
  float alu5 = (alu4 * 2.0f);
  bool alu6 = (alu5 < 0.0f);
  float alu7 = (alu6 ? 0.0f : alu5);
  data0[alu1] = alu7;
}
