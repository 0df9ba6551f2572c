// kernel E_256
extern "C" __global__ void __launch_bounds__(256) E_256(unsigned char* __restrict__ data0, const float* __restrict__ data1) {
  int gidx0 = blockIdx.x*blockDim.x+threadIdx.x;
  float val0 = data1[gidx0];
  float alu1 = (val0 * 300.0f);
  float alu2 = (alu1 - 150.0f);
  unsigned char alu3 = ((unsigned char)(long long)(alu2));
  data0[gidx0] = alu3;
}

// kernel E_256
extern "C" __global__ void __launch_bounds__(256) E_256(int* __restrict__ data0, const float* __restrict__ data1) {
  int gidx0 = blockIdx.x*blockDim.x+threadIdx.x;
  float val0 = data1[gidx0];
  float alu1 = (val0 * 300.0f);
  float alu2 = (alu1 - 150.0f);
  int alu3 = __float_as_int(alu2);
  int alu4 = ((int)(alu3 >> (3 & 31)));
  data0[gidx0] = alu4;
}

// kernel E_256
#include <cuda_fp16.h>
extern "C" __global__ void __launch_bounds__(256) E_256(short* __restrict__ data0, const float* __restrict__ data1) {
  int gidx0 = blockIdx.x*blockDim.x+threadIdx.x;
  float val0 = data1[gidx0];
  float alu1 = (val0 * 300.0f);
  float alu2 = (alu1 - 150.0f);
  half alu3 = __float2half(alu2);
  short alu4 = __half_as_short(alu3);
  data0[gidx0] = alu4;
}

// kernel E_256
extern "C" __global__ void __launch_bounds__(256) E_256(double* __restrict__ data0, const float* __restrict__ data1) {
  int gidx0 = blockIdx.x*blockDim.x+threadIdx.x;
  float val0 = data1[gidx0];
  float alu1 = (val0 * 300.0f);
  float alu2 = (alu1 - 150.0f);
  long long alu3 = ((long long)(alu2));
  long long alu4 = (alu3 / 7ll);
  long long alu5 = (alu3 % 7ll);
  bool alu6 = (alu5 != 0ll);
  bool alu7 = (alu3 < 0ll);
  bool alu8 = (alu7 ^ 0);
  bool alu9 = (alu6 & alu8);
  long long alu10 = ((long long)(alu9));
  long long alu11 = (alu10 * -1ll);
  long long alu12 = (alu4 + alu11);
  double alu13 = ((double)(alu12));
  data0[gidx0] = alu13;
}

