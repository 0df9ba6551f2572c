// kernel E_8_8 global=(8, 8) local=(8, 8)
#include <metal_stdlib>
using namespace metal;
kernel void E_8_8(device half* data0 [[buffer(0)]], const device half* data1 [[buffer(1)]], const device half* data2 [[buffer(2)]], uint3 gid [[thread_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = (int)gid.x;
  int gidx1 = (int)gid.y;
  int alu0 = (gidx1 * 8);
  int alu1 = (alu0 + gidx0);
  half val2 = data1[alu1];
  half val3 = data2[alu1];
  half alu4 = (val2 * val3);
  bool alu5 = (alu4 < ((half)0.0f));
  half alu6 = (alu5 ? ((half)0.0f) : alu4);
  half alu7 = (alu6 + ((half)0.5f));
  data0[alu1] = alu7;
}
