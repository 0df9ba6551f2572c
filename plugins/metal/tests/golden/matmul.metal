// kernel r_16_8 global=(16, 8, 16) local=(16, 1, 1)
#include <metal_stdlib>
using namespace metal;
kernel void r_16_8(device float* data0 [[buffer(0)]], const device float* data1 [[buffer(1)]], const device float* data2 [[buffer(2)]], uint3 gid [[thread_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  threadgroup float temp0[16];
  int lidx0 = (int)lid.x;
  int gidx1 = (int)gid.y;
  int gidx2 = (int)gid.z;
  int alu0 = (gidx2 * 8);
  int alu1 = (alu0 + gidx1);
  int alu2 = (gidx2 * 24);
  int alu3 = (lidx0 * 8);
  float acc0 = 0.0f;
  for (int ridx1 = 0; ridx1 < 2; ridx1++) {
    int alu4 = (ridx1 * 16);
    int alu5 = (alu4 + lidx0);
    bool alu6 = (alu5 < 24);
    int alu7 = (alu2 + alu5);
    float val8 = (alu6 ? data1[alu7] : 0.0f);
    int alu9 = (ridx1 * 128);
    int alu10 = (alu9 + alu3);
    int alu11 = (alu10 + gidx1);
    float val12 = (alu6 ? data2[alu11] : 0.0f);
    float alu13 = (val8 * val12);
    float alu14 = (alu6 ? alu13 : 0.0f);
    acc0 = (acc0 + alu14);
  }
  temp0[lidx0] = acc0;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float acc1 = 0.0f;
  for (int ridx2 = 0; ridx2 < 16; ridx2++) {
    float val15 = temp0[ridx2];
    acc1 = (acc1 + val15);
  }
  bool alu16 = (lidx0 == 0);
  if (alu16) { data0[alu1] = acc1; }
}
