// E_4_4 global=(16,) local=(16,)
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
__kernel void E_4_4(__global half* restrict data0, __global const half* restrict data1, __global const half* restrict data2) {
  int gidx0 = (int)(get_group_id(0) * get_local_size(0) + get_local_id(0));
  half val0 = data1[gidx0];
  half val1 = data2[gidx0];
  half alu2 = (val0 * val1);
  half alu3 = (alu2 + ((half)1.0f));
  half alu4 = sqrt(alu3);
  data0[gidx0] = alu4;
}
