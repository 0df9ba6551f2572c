// kernel r_1
extern "C" __global__ void __launch_bounds__(64) r_1(float* __restrict__ data0, const float* __restrict__ data1) {
  __shared__ float temp0[64];
  int lidx0 = threadIdx.x;
  float acc0 = 0.0f;
  for (int ridx1 = 0; ridx1 < 64; ridx1++) {
    int alu0 = (ridx1 * 64);
    int alu1 = (alu0 + lidx0);
    float val2 = data1[alu1];
    acc0 = (acc0 + val2);
  }
  temp0[lidx0] = acc0;
  __syncthreads();
  float acc1 = 0.0f;
  for (int ridx2 = 0; ridx2 < 64; ridx2++) {
    float val3 = temp0[ridx2];
    acc1 = (acc1 + val3);
  }
  bool alu4 = (lidx0 == 0);
  if (alu4) { data0[0] = acc1; }
}

