// kernel r_16_8 global=(8, 16) local=(8, 16)
#include <metal_stdlib>
using namespace metal;
kernel void r_16_8(device float* data0 [[buffer(0)]], const device float* data1 [[buffer(1)]], const device float* data2 [[buffer(2)]], uint3 gid [[thread_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = (int)gid.x;
  int gidx1 = (int)gid.y;
  int alu0 = (gidx1 * 8);
  int alu1 = (alu0 + gidx0);
  int alu2 = (gidx1 * 24);
  float acc0 = 0.0f;
  for (int ridx0 = 0; ridx0 < 24; ridx0++) {
    int alu3 = (alu2 + ridx0);
    float val4 = data1[alu3];
    int alu5 = (ridx0 * 8);
    int alu6 = (alu5 + gidx0);
    float val7 = data2[alu6];
    float alu8 = (val4 * val7);
    acc0 = (acc0 + alu8);
  }
  data0[alu1] = acc0;
}
