// kernel E_4_8 global=(32,) local=(32,)
#include <metal_stdlib>
using namespace metal;
kernel void E_4_8(device float* data0 [[buffer(0)]], const device float* data1 [[buffer(1)]], const device float* data2 [[buffer(2)]], uint3 gid [[thread_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = (int)gid.x;
  float val0 = data1[gidx0];
  float val1 = data2[gidx0];
  float alu2 = (val0 * val1);
  float alu3 = (alu2 + 1.0f);
  float alu4 = precise::exp2(alu3);
  float alu5 = precise::sqrt(alu4);
  data0[gidx0] = alu5;
}
