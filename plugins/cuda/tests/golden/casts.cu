// kernel E_256
#include <cuda_fp16.h>
extern "C" __global__ void __launch_bounds__(256) E_256(unsigned char* __restrict__ data0, int* __restrict__ data1, short* __restrict__ data2, double* __restrict__ data3, const float* __restrict__ data4) {
  int gidx0 = blockIdx.x*blockDim.x+threadIdx.x;
  float val0 = data4[gidx0];
  float alu1 = (val0 * 300.0f);
  float alu2 = (alu1 - 150.0f);
  unsigned char alu3 = ((unsigned char)(long long)(alu2));
  data0[gidx0] = alu3;
  int alu4 = __float_as_int(alu2);
  int alu5 = ((int)(alu4 >> (3 & 31)));
  data1[gidx0] = alu5;
  half alu6 = __float2half(alu2);
  short alu7 = __half_as_short(alu6);
  data2[gidx0] = alu7;
  long long alu8 = ((long long)(alu2));
  long long alu9 = (alu8 / 7ll);
  long long alu10 = (alu8 % 7ll);
  bool alu11 = (alu10 != 0ll);
  bool alu12 = (alu8 < 0ll);
  bool alu13 = (alu12 ^ 0);
  bool alu14 = (alu11 & alu13);
  long long alu15 = ((long long)(alu14));
  long long alu16 = ((long long)(((unsigned long long)alu15) * ((unsigned long long)-1ll)));
  long long alu17 = ((long long)(((unsigned long long)alu9) + ((unsigned long long)alu16)));
  double alu18 = ((double)(alu17));
  data3[gidx0] = alu18;
}

