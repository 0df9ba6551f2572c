// kernel E_64_64
extern "C" __global__ void __launch_bounds__(1024) E_64_64(float* __restrict__ data0, const float* __restrict__ data1, const float* __restrict__ data2, const float* __restrict__ data3) {
  int gidx0 = blockIdx.x*blockDim.x+threadIdx.x;
  int gidx1 = blockIdx.y*blockDim.y+threadIdx.y;
  int alu0 = (gidx1 * 64);
  int alu1 = (alu0 + gidx0);
  float val2 = data1[alu1];
  float val3 = data2[alu1];
  float alu4 = (val2 * val3);
  float val5 = data3[alu1];
  float alu6 = (alu4 + val5);
  bool alu7 = (alu6 < 0.0f);
  float alu8 = (alu7 ? 0.0f : alu6);
  float alu9 = (alu8 * 2.0f);
  data0[alu1] = alu9;
}

