// kernel r_64_48
extern "C" __global__ void __launch_bounds__(32) r_64_48(float* __restrict__ data0, const float* __restrict__ data1, const float* __restrict__ data2) {
  __shared__ float temp0[32];
  int lidx0 = threadIdx.x;
  int gidx1 = blockIdx.y*blockDim.y+threadIdx.y;
  int gidx2 = blockIdx.z*blockDim.z+threadIdx.z;
  int alu0 = (gidx2 * 48);
  int alu1 = (alu0 + gidx1);
  int alu2 = (gidx2 * 32);
  int alu3 = (alu2 + lidx0);
  float val4 = data1[alu3];
  int alu5 = (lidx0 * 48);
  int alu6 = (alu5 + gidx1);
  float val7 = data2[alu6];
  float alu8 = (val4 * val7);
  temp0[lidx0] = alu8;
  __syncthreads();
  float acc0 = 0.0f;
  for (int ridx2 = 0; ridx2 < 32; ridx2++) {
    float val9 = temp0[ridx2];
    acc0 = (acc0 + val9);
  }
  bool alu10 = (lidx0 == 0);
  if (alu10) { data0[alu1] = acc0; }
}

