// kernel r_64_48
extern "C" __global__ void __launch_bounds__(768) r_64_48(float* __restrict__ data0, const float* __restrict__ data1, const float* __restrict__ data2) {
  int gidx0 = blockIdx.x*blockDim.x+threadIdx.x;
  int gidx1 = blockIdx.y*blockDim.y+threadIdx.y;
  int alu0 = (gidx1 * 48);
  int alu1 = (alu0 + gidx0);
  int alu2 = (gidx1 * 32);
  float acc0 = 0.0f;
  for (int ridx0 = 0; ridx0 < 32; ridx0++) {
    int alu3 = (alu2 + ridx0);
    float val4 = data1[alu3];
    int alu5 = (ridx0 * 48);
    int alu6 = (alu5 + gidx0);
    float val7 = data2[alu6];
    float alu8 = (val4 * val7);
    acc0 = (acc0 + alu8);
  }
  data0[alu1] = acc0;
}

