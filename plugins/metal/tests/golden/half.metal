// kernel E_8_8 global=(64,) local=(64,)
#include <metal_stdlib>
using namespace metal;
kernel void E_8_8(device half* data0 [[buffer(0)]], const device half* data1 [[buffer(1)]], const device half* data2 [[buffer(2)]], uint3 gid [[thread_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = (int)gid.x;
  half val0 = data1[gidx0];
  half val1 = data2[gidx0];
  half alu2 = (val0 * val1);
  bool alu3 = (alu2 < ((half)0.0f));
  half alu4 = (alu3 ? ((half)0.0f) : alu2);
  half alu5 = (alu4 + ((half)0.5f));
  data0[gidx0] = alu5;
}
