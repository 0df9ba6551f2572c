// kernel E_4_8 global=(8, 4) local=(8, 4)
#include <metal_stdlib>
using namespace metal;
kernel void E_4_8(device float* data0 [[buffer(0)]], const device float* data1 [[buffer(1)]], const device float* data2 [[buffer(2)]], uint3 gid [[thread_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = (int)gid.x;
  int gidx1 = (int)gid.y;
  int alu0 = (gidx1 * 8);
  int alu1 = (alu0 + gidx0);
  float val2 = data1[alu1];
  float val3 = data2[alu1];
  float alu4 = (val2 * val3);
  float alu5 = (alu4 + 1.0f);
  float alu6 = precise::exp2(alu5);
  float alu7 = precise::sqrt(alu6);
  data0[alu1] = alu7;
}
