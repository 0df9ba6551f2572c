// r_4 global=(4,) local=(4,)
__kernel void r_4(__global float* restrict data0, __global const float* restrict data1) {
  int gidx0 = (int)(get_group_id(0) * get_local_size(0) + get_local_id(0));
  int alu0 = (gidx0 * 7);
  float acc0 = -((float)INFINITY);
  for (int ridx0 = 0; ridx0 < 7; ridx0++) {
    int alu1 = (alu0 + ridx0);
    float val2 = data1[alu1];
    acc0 = ((acc0 != acc0 || acc0 > val2) ? acc0 : val2);
  }
  data0[gidx0] = acc0;
}
