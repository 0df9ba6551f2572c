// kernel r_64
extern "C" __global__ void __launch_bounds__(32) r_64(float* __restrict__ data0, float* __restrict__ data1, float* __restrict__ data2, const float* __restrict__ data3) {
  __shared__ float temp0[32];
  __shared__ float temp1[32];
  __shared__ float temp2[32];
  int lidx0 = threadIdx.x;
  int gidx1 = blockIdx.y*blockDim.y+threadIdx.y;
  int alu0 = (gidx1 * 1024);
  float acc0 = 0.0f;
  float acc1 = -__int_as_float(0x7f800000);
  float acc2 = 0.0f;
  for (int ridx1 = 0; ridx1 < 32; ridx1++) {
    int alu1 = (ridx1 * 32);
    int alu2 = (alu1 + lidx0);
    int alu3 = (alu0 + alu2);
    float val4 = data3[alu3];
    acc0 = (acc0 + val4);
    acc1 = ((acc1 != acc1 || acc1 > val4) ? acc1 : val4);
    float alu5 = (val4 * val4);
    acc2 = (acc2 + alu5);
  }
  temp0[lidx0] = acc0;
  __syncthreads();
  temp1[lidx0] = acc1;
  __syncthreads();
  temp2[lidx0] = acc2;
  __syncthreads();
  float acc3 = 0.0f;
  float acc4 = -__int_as_float(0x7f800000);
  float acc5 = 0.0f;
  for (int ridx2 = 0; ridx2 < 32; ridx2++) {
    float val6 = temp0[ridx2];
    acc3 = (acc3 + val6);
    float val7 = temp1[ridx2];
    acc4 = ((acc4 != acc4 || acc4 > val7) ? acc4 : val7);
    float val8 = temp2[ridx2];
    acc5 = (acc5 + val8);
  }
  bool alu9 = (lidx0 == 0);
  if (alu9) { data0[gidx1] = acc3; }
  if (alu9) { data1[gidx1] = acc4; }
  if (alu9) { data2[gidx1] = acc5; }
}

