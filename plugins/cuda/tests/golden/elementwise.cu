// kernel E_64_64
extern "C" __global__ void __launch_bounds__(256) E_64_64(float* __restrict__ data0, const float* __restrict__ data1, const float* __restrict__ data2, const float* __restrict__ data3) {
  int gidx0 = blockIdx.x*blockDim.x+threadIdx.x;
  float val0 = data1[gidx0];
  float val1 = data2[gidx0];
  float alu2 = (val0 * val1);
  float val3 = data3[gidx0];
  float alu4 = (alu2 + val3);
  bool alu5 = (alu4 < 0.0f);
  float alu6 = (alu5 ? 0.0f : alu4);
  float alu7 = (alu6 * 2.0f);
  data0[gidx0] = alu7;
}

