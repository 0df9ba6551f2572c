// kernel r_64
extern "C" __global__ void __launch_bounds__(32) r_64(float* __restrict__ data0, const float* __restrict__ data1) {
  __shared__ float temp0[32];
  int lidx0 = threadIdx.x;
  int gidx1 = blockIdx.y*blockDim.y+threadIdx.y;
  int alu0 = (gidx1 * 1024);
  float acc0 = -__int_as_float(0x7f800000);
  for (int ridx1 = 0; ridx1 < 32; ridx1++) {
    int alu1 = (ridx1 * 32);
    int alu2 = (alu1 + lidx0);
    int alu3 = (alu0 + alu2);
    float val4 = data1[alu3];
    acc0 = ((acc0 != acc0 || acc0 > val4) ? acc0 : val4);
  }
  temp0[lidx0] = acc0;
  __syncthreads();
  float acc1 = -__int_as_float(0x7f800000);
  for (int ridx2 = 0; ridx2 < 32; ridx2++) {
    float val5 = temp0[ridx2];
    acc1 = ((acc1 != acc1 || acc1 > val5) ? acc1 : val5);
  }
  bool alu6 = (lidx0 == 0);
  if (alu6) { data0[gidx1] = acc1; }
}

