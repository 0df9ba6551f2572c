// kernel r_64_64
#include <cuda_fp16.h>
struct __align__(4) plugrad_half2 { half v[2]; };
struct __align__(8) plugrad_half4 { half v[4]; };
struct __align__(16) plugrad_half8 { half v[8]; };
struct __align__(16) plugrad_float4 { float v[4]; };
__device__ __forceinline__ plugrad_float4 plugrad_mma_m16n8k16_f16_f32(plugrad_half8 a, plugrad_half4 b, plugrad_float4 c) {
  const unsigned *ra = reinterpret_cast<const unsigned *>(&a), *rb = reinterpret_cast<const unsigned *>(&b);
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};" : "+f"(c.v[0]), "+f"(c.v[1]), "+f"(c.v[2]), "+f"(c.v[3]) : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]));
  return c;
}
extern "C" __global__ void __launch_bounds__(128) r_64_64(half* __restrict__ data0, const half* __restrict__ data1, const half* __restrict__ data2) {
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
    plugrad_half2 val21 = (*(const plugrad_half2 *)(data1 + alu20));
    int alu22 = (alu14 + alu19);
    int alu23 = (alu22 + 256);
    plugrad_half2 val24 = (*(const plugrad_half2 *)(data1 + alu23));
    int alu25 = (alu8 + alu18);
    int alu26 = (alu25 + alu13);
    int alu27 = (alu26 + 8);
    plugrad_half2 val28 = (*(const plugrad_half2 *)(data1 + alu27));
    int alu29 = (alu25 + alu14);
    int alu30 = (alu29 + 264);
    plugrad_half2 val31 = (*(const plugrad_half2 *)(data1 + alu30));
    plugrad_half8 vec32 = plugrad_half8{{val21.v[0], val21.v[1], val24.v[0], val24.v[1], val28.v[0], val28.v[1], val31.v[0], val31.v[1]}};
    int alu33 = (ridx0 * 1024);
    int alu34 = (alu33 + alu15);
    int alu35 = (alu34 + alu16);
    half val36 = data2[alu35];
    int alu37 = (alu15 + alu33);
    int alu38 = (alu37 + alu16);
    int alu39 = (alu38 + 64);
    half val40 = data2[alu39];
    int alu41 = (alu38 + 512);
    half val42 = data2[alu41];
    int alu43 = (alu38 + 576);
    half val44 = data2[alu43];
    plugrad_half4 vec45 = plugrad_half4{{val36, val40, val42, val44}};
    acc0 = plugrad_mma_m16n8k16_f16_f32(vec32, vec45, acc0);
  }
  half alu46 = __float2half(acc0.v[0]);
  data0[alu10] = alu46;
  int alu47 = (alu8 + alu6);
  int alu48 = (alu47 + alu4);
  int alu49 = (alu48 + 1);
  half alu50 = __float2half(acc0.v[1]);
  data0[alu49] = alu50;
  int alu51 = (alu3 + alu0);
  int alu52 = (alu51 + alu9);
  int alu53 = (alu52 + 512);
  half alu54 = __float2half(acc0.v[2]);
  data0[alu53] = alu54;
  int alu55 = (alu47 + alu51);
  int alu56 = (alu55 + 513);
  half alu57 = __float2half(acc0.v[3]);
  data0[alu56] = alu57;
}

