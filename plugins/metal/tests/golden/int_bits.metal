// kernel E_16 global=(16,) local=(16,)
#include <metal_stdlib>
using namespace metal;
kernel void E_16(device int* data0 [[buffer(0)]], const device float* data1 [[buffer(1)]], const device float* data2 [[buffer(2)]], uint3 gid [[thread_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  int gidx0 = (int)gid.x;
  float val0 = data1[gidx0];
  float alu1 = (val0 * 100.0f);
  int alu2 = ((int)(alu1));
  int alu3 = (alu2 / 7);
  int alu4 = (alu2 % 7);
  bool alu5 = (alu4 != 0);
  bool alu6 = (alu2 < 0);
  bool alu7 = (alu6 ^ 0);
  bool alu8 = (alu5 & alu7);
  int alu9 = ((int)(alu8));
  int alu10 = ((int)(((uint)alu9) * ((uint)-1)));
  int alu11 = ((int)(((uint)alu3) + ((uint)alu10)));
  float val12 = data2[gidx0];
  int alu13 = as_type<int>(val12);
  int alu14 = ((int)(alu13 >> (3 & 31)));
  int alu15 = ((int)(((uint)alu11) + ((uint)alu14)));
  data0[gidx0] = alu15;
}
