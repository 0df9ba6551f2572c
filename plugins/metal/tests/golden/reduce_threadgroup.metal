// kernel r_1 global=(32,) local=(32,)
#include <metal_stdlib>
using namespace metal;
kernel void r_1(device float* data0 [[buffer(0)]], const device float* data1 [[buffer(1)]], uint3 gid [[thread_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  threadgroup float temp0[32];
  int lidx0 = (int)lid.x;
  float acc0 = 0.0f;
  for (int ridx1 = 0; ridx1 < 32; ridx1++) {
    int alu0 = (ridx1 * 32);
    int alu1 = (alu0 + lidx0);
    bool alu2 = (alu1 < 1000);
    float val3 = (alu2 ? data1[alu1] : 0.0f);
    acc0 = (acc0 + val3);
  }
  temp0[lidx0] = acc0;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float acc1 = 0.0f;
  for (int ridx2 = 0; ridx2 < 32; ridx2++) {
    float val4 = temp0[ridx2];
    acc1 = (acc1 + val4);
  }
  bool alu5 = (lidx0 == 0);
  if (alu5) { data0[0] = acc1; }
}
