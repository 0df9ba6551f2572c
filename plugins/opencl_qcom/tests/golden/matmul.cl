// r_8_8 global=(8, 8) local=(8, 8)
__kernel void r_8_8(__global float* restrict data0, __global const float* restrict data1, __global const float* restrict data2) {
  int gidx0 = (int)(get_group_id(0) * get_local_size(0) + get_local_id(0));
  int gidx1 = (int)(get_group_id(1) * get_local_size(1) + get_local_id(1));
  int alu0 = (gidx1 * 8);
  int alu1 = (alu0 + gidx0);
  float acc0 = 0.0f;
  for (int ridx0 = 0; ridx0 < 8; ridx0++) {
    int alu2 = (alu0 + ridx0);
    float val3 = data1[alu2];
    int alu4 = (ridx0 * 8);
    int alu5 = (alu4 + gidx0);
    float val6 = data2[alu5];
    float alu7 = (val3 * val6);
    acc0 = (acc0 + alu7);
  }
  data0[alu1] = acc0;
}
