// kernel r_64_64
#include <cuda_fp16.h>
struct __align__(8) plugrad_half4 { half v[4]; };
struct __align__(16) plugrad_half8 { half v[8]; };
struct __align__(16) plugrad_float4 { float v[4]; };
__device__ __forceinline__ plugrad_float4 plugrad_mma_m16n8k16_f16_f32(plugrad_half8 a, plugrad_half4 b, plugrad_float4 c) {
  const unsigned *ra = reinterpret_cast<const unsigned *>(&a), *rb = reinterpret_cast<const unsigned *>(&b);
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};" : "+f"(c.v[0]), "+f"(c.v[1]), "+f"(c.v[2]), "+f"(c.v[3]) : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]));
  return c;
}
extern "C" __global__ void __launch_bounds__(256) r_64_64(half* __restrict__ data0, const half* __restrict__ data1, const half* __restrict__ data2) {
  int gidx0 = blockIdx.x*blockDim.x+threadIdx.x;
  int gidx1 = blockIdx.y*blockDim.y+threadIdx.y;
  int alu0 = (gidx1 * 1024);
  int alu1 = (gidx0 / 4);
  int alu2 = (alu1 % 8);
  int alu3 = (alu2 * 64);
  int alu4 = (alu0 + alu3);
  int alu5 = (gidx0 / 32);
  int alu6 = (alu5 * 8);
  int alu7 = (gidx0 % 4);
  int alu8 = (alu7 * 2);
  int alu9 = (alu6 + alu8);
  int alu10 = (alu4 + alu9);
  int alu11 = (gidx1 * 512);
  int alu12 = (alu2 * 32);
  int alu13 = (alu11 + alu12);
  int alu14 = (alu12 + alu11);
  int alu15 = (alu7 * 128);
  int alu16 = (alu6 + alu2);
  plugrad_float4 vec17 = plugrad_float4{{0.0f, 0.0f, 0.0f, 0.0f}};
  plugrad_float4 acc0 = vec17;
  for (int ridx0 = 0; ridx0 < 2; ridx0++) {
    int alu18 = (ridx0 * 16);
    int alu19 = (alu18 + alu8);
    int alu20 = (alu13 + alu19);
    half val21 = data1[alu20];
    int alu22 = (alu8 + alu18);
    int alu23 = (alu22 + alu13);
    int alu24 = (alu23 + 1);
    half val25 = data1[alu24];
    int alu26 = (alu14 + alu19);
    int alu27 = (alu26 + 256);
    half val28 = data1[alu27];
    int alu29 = (alu22 + alu14);
    int alu30 = (alu29 + 257);
    half val31 = data1[alu30];
    int alu32 = (alu23 + 8);
    half val33 = data1[alu32];
    int alu34 = (alu23 + 9);
    half val35 = data1[alu34];
    int alu36 = (alu29 + 264);
    half val37 = data1[alu36];
    int alu38 = (alu29 + 265);
    half val39 = data1[alu38];
    plugrad_half8 vec40 = plugrad_half8{{val21, val25, val28, val31, val33, val35, val37, val39}};
    int alu41 = (ridx0 * 1024);
    int alu42 = (alu41 + alu15);
    int alu43 = (alu42 + alu16);
    half val44 = data2[alu43];
    int alu45 = (alu15 + alu41);
    int alu46 = (alu45 + alu16);
    int alu47 = (alu46 + 64);
    half val48 = data2[alu47];
    int alu49 = (alu46 + 512);
    half val50 = data2[alu49];
    int alu51 = (alu46 + 576);
    half val52 = data2[alu51];
    plugrad_half4 vec53 = plugrad_half4{{val44, val48, val50, val52}};
    acc0 = plugrad_mma_m16n8k16_f16_f32(vec40, vec53, acc0);
  }
  half alu54 = __float2half(acc0.v[0]);
  data0[alu10] = alu54;
  int alu55 = (alu8 + alu6);
  int alu56 = (alu55 + alu4);
  int alu57 = (alu56 + 1);
  half alu58 = __float2half(acc0.v[1]);
  data0[alu57] = alu58;
  int alu59 = (alu3 + alu0);
  int alu60 = (alu59 + alu9);
  int alu61 = (alu60 + 512);
  half alu62 = __float2half(acc0.v[2]);
  data0[alu61] = alu62;
  int alu63 = (alu55 + alu59);
  int alu64 = (alu63 + 513);
  half alu65 = __float2half(acc0.v[3]);
  data0[alu64] = alu65;
}

