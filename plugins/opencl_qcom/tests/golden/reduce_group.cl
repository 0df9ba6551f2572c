// r_4 global=(32, 4) local=(32, 1)
__kernel void r_4(__global float* restrict data0, __global const float* restrict data1) {
  __local float temp0[32];
  int lidx0 = (int)get_local_id(0);
  int gidx1 = (int)(get_group_id(1) * get_local_size(1) + get_local_id(1));
  int alu0 = (gidx1 * 100);
  float acc0 = 0.0f;
  for (int ridx1 = 0; ridx1 < 4; ridx1++) {
    int alu1 = (ridx1 * 32);
    int alu2 = (alu1 + lidx0);
    int alu3 = (alu0 + alu2);
    bool alu4 = (alu2 < 100);
    float val5 = (alu4 ? data1[alu3] : 0.0f);
    acc0 = (acc0 + val5);
  }
  temp0[lidx0] = acc0;
  barrier(CLK_LOCAL_MEM_FENCE);
  float acc1 = 0.0f;
  for (int ridx2 = 0; ridx2 < 32; ridx2++) {
    float val6 = temp0[ridx2];
    acc1 = (acc1 + val6);
  }
  bool alu7 = (lidx0 == 0);
  if (alu7) { data0[gidx1] = acc1; }
}
