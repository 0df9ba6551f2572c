extern "C" __global__ void __launch_bounds__(128) group_sum_1024(float* __restrict__ data0, const float* __restrict__ data1) {
  __shared__ float temp0[128];
  int lidx0 = threadIdx.x;
  float acc0 = 0.0f;
  for (int ridx0 = 0; ridx0 < 8; ridx0++) {
    int alu0 = (ridx0 * 128);
    int alu1 = (alu0 + lidx0);
    float val2 = data1[alu1];
    acc0 = (acc0 + val2);
  }
  temp0[lidx0] = acc0;
  __syncthreads();
  float acc1 = 0.0f;
  for (int ridx1 = 0; ridx1 < 128; ridx1++) {
    float val3 = temp0[ridx1];
    acc1 = (acc1 + val3);
  }
  bool alu4 = (lidx0 == 0);
  if (alu4) { data0[0] = acc1; }
}
