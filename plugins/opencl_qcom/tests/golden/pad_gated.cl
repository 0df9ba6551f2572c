// E_5_6 global=(6, 5) local=(6, 5)
__kernel void E_5_6(__global float* restrict data0, __global const float* restrict data1) {
  int gidx0 = (int)(get_group_id(0) * get_local_size(0) + get_local_id(0));
  int gidx1 = (int)(get_group_id(1) * get_local_size(1) + get_local_id(1));
  int alu0 = (gidx1 * 6);
  int alu1 = (alu0 + gidx0);
  bool alu2 = (0 < gidx1);
  bool alu3 = (gidx1 < 4);
  bool alu4 = (alu2 & alu3);
  bool alu5 = (1 < gidx0);
  bool alu6 = (alu4 & alu5);
  int alu7 = (gidx1 * 4);
  int alu8 = (gidx0 + alu7);
  int alu9 = (alu8 + -6);
  float val10 = (alu6 ? data1[alu9] : 0.0f);
  float alu11 = (val10 * 1.4426950216293335f);
  float alu12 = exp2(alu11);
  float alu13 = (alu6 ? alu12 : 0.0f);
  float alu14 = (alu13 + 1.0f);
  data0[alu1] = alu14;
}
