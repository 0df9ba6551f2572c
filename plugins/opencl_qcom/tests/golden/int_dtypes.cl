// E_6 global=(6,) local=(6,)
__kernel void E_6(__global uchar* restrict data0, __global const long* restrict data1, __global const ulong* restrict data2) {
  int gidx0 = (int)(get_group_id(0) * get_local_size(0) + get_local_id(0));
  long val0 = data1[gidx0];
  long alu1 = ((long)(((ulong)val0) * ((ulong)3L)));
  long alu2 = ((long)(((ulong)alu1) + ((ulong)1099511627776L)));
  ulong val3 = data2[gidx0];
  long alu4 = ((long)(val3));
  bool alu5 = (alu2 < alu4);
  data0[gidx0] = alu5;
}
