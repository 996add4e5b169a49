// ABCD_VECTOR_CLONES: compile a hot loop-nest function once per x86 instruction-set level
// (AVX-512, AVX2+FMA, baseline) and pick the clone for this CPU when the program loads (GCC
// target_clones / ifunc). The engine is built for the baseline x86-64 so it runs anywhere; the
// per-sequence attention kernels still get 16-wide vectors where the CPU has them.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__)
#define ABCD_VECTOR_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
// Where the clones are made, a function may also be compiled for AVX2 + FMA + F16C alone
// (ABCD_F16C_TARGET), for code the baseline clone cannot hold; call it only where
// cpu::kernels::CpuRunsAvx2Kernels() holds.
#define ABCD_HAS_VECTOR_CLONES 1
#define ABCD_F16C_TARGET __attribute__((target("avx2,fma,f16c")))
#else
#define ABCD_VECTOR_CLONES
#define ABCD_HAS_VECTOR_CLONES 0
#endif
