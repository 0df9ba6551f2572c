// kernel r_4 global=(32, 4) local=(32, 1)
#include <metal_stdlib>
using namespace metal;
kernel void r_4(device float* data0 [[buffer(0)]], const device float* data1 [[buffer(1)]], uint3 gid [[thread_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  threadgroup float temp0[32];
  int lidx0 = (int)lid.x;
  int gidx1 = (int)gid.y;
  int alu0 = (gidx1 * 300);
  float acc0 = -INFINITY;
  for (int ridx1 = 0; ridx1 < 10; ridx1++) {
    int alu1 = (ridx1 * 32);
    int alu2 = (alu1 + lidx0);
    bool alu3 = (alu2 < 300);
    int alu4 = (alu0 + alu2);
    float val5 = (alu3 ? data1[alu4] : 0.0f);
    float alu6 = (alu3 ? val5 : -INFINITY);
    acc0 = ((acc0 != acc0 || acc0 > alu6) ? acc0 : alu6);
  }
  temp0[lidx0] = acc0;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float acc1 = -INFINITY;
  for (int ridx2 = 0; ridx2 < 32; ridx2++) {
    float val7 = temp0[ridx2];
    acc1 = ((acc1 != acc1 || acc1 > val7) ? acc1 : val7);
  }
  bool alu8 = (lidx0 == 0);
  if (alu8) { data0[gidx1] = acc1; }
}
