// E_4_4 global=(4, 4) local=(4, 4)
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
__kernel void E_4_4(__global half* restrict data0, __global const half* restrict data1, __global const half* restrict data2) {
  int gidx0 = (int)(get_group_id(0) * get_local_size(0) + get_local_id(0));
  int gidx1 = (int)(get_group_id(1) * get_local_size(1) + get_local_id(1));
  int alu0 = (gidx1 * 4);
  int alu1 = (alu0 + gidx0);
  half val2 = data1[alu1];
  half val3 = data2[alu1];
  half alu4 = (val2 * val3);
  half alu5 = (alu4 + ((half)1.0f));
  half alu6 = sqrt(alu5);
  data0[alu1] = alu6;
}
