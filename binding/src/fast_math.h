// exp() and the standard normal distribution (for the exact GELU) in double precision, written out
// in plain operations so that they are fast, vectorisable and machine-independent:
//  - no branches: out-of-range inputs are clamped and the result selected, so GCC vectorises the
//    loops that call them (SSE2 at the baseline: two doubles a vector; wider where built wider).
//    GCC if-converts those selects only with -fno-trapping-math (which changes no value: it only
//    stops keeping floating-point exception flags exact); without it the loops stay scalar;
//  - no library calls: glibc's exp() and erf() pick their code by the CPU (an FMA variant where the
//    CPU has one), so their bits could differ between machines; these use only IEEE-754 adds,
//    multiplies, divides, conversions and integer bit operations, each exact or correctly rounded,
//    so every machine, vector width and thread count gives the same bits;
//  - no multiply-add contraction: a fused a * b + c rounds once instead of twice, so a build that
//    fused some (GCC's default -ffp-contract=fast does wherever the target has FMA: -march=native,
//    an x86-64-v3 or v4 build) would give other bits (it did in 38% of a sweep's doubles).
// So CMakeLists.txt compiles the files that include this header with -ffp-contract=off and
// -fno-trapping-math (cpu/transformer.cc), or nvcc's --fmad=false (cuda/transformer.cu, whose GELU
// and softmax exps thus have the CPU's bits): include it only from such a file.
// Accuracy: a few units in the last place of a double (see each function), far below the float32
// rounding of the kernels' results, which are therefore the nearest floats but where a value lies
// within about 1e-15 (relative) of a midpoint between two floats.
#pragma once
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define FT_MATH __host__ __device__ inline
#else
#define FT_MATH inline
#endif

namespace ft::fast_math {

FT_MATH uint64_t Bits(double x) {
#ifdef __CUDA_ARCH__
  return static_cast<uint64_t>(__double_as_longlong(x));
#else
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
#endif
}

FT_MATH double FromBits(uint64_t bits) {
#ifdef __CUDA_ARCH__
  return __longlong_as_double(static_cast<long long>(bits));
#else
  double x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
#endif
}

// exp(x): 0 for x < -708 (where exp(x) < 3.3e-308, about the smallest normal double: never a
// denormal), +inf for x > 709 (exp(709) = 8.2e307; the callers' arguments are <= 0), NaN for NaN.
// Relative error below 5e-16 (measured against mpmath over [-708, 709]).
// Cody and Waite's reduction: x = n ln2 + r, n = round(x / ln2) (the 1.5 2^52 shifter rounds to the
// nearest integer), |r| <= ln2 / 2, r = x - n ln2_hi - n ln2_lo with n ln2_hi exact (ln2_hi has 32
// significant bits, n in [-1021, 1023]); exp(r) by its Taylor polynomial of degree 12 (truncation
// error r^13 / 13! < 1.7e-16); 2^n put in the exponent bits (n + 1023 in [2, 2046]: a normal double).
FT_MATH double Exp(double x) {
  constexpr double kLo = -708.0, kHi = 709.0;
  constexpr double kLog2e = 1.4426950408889634;        // 1 / ln 2
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // 0x3fe62e42fee00000: ln 2's first 32 bits
  constexpr double kLn2Lo = 1.90821492927058770002e-10;  // ln 2 - kLn2Hi
  constexpr double kShifter = 6755399441055744.0;        // 1.5 2^52: adding it rounds to an integer
  double xc = x < kLo ? kLo : x;  // NaN stays NaN
  xc = xc > kHi ? kHi : xc;
  const double shifted = xc * kLog2e + kShifter;  // 1.5 2^52 + n: n in its low bits
  const double n = shifted - kShifter;
  const double r = (xc - n * kLn2Hi) - n * kLn2Lo;
  // exp(r) = sum over k of r^k / k!, k = 0..12, by Estrin's scheme (see Erfcx)
  const double r2 = r * r, r4 = r2 * r2, r8 = r4 * r4;
  const double p01 = 1.0 + r;
  const double p23 = 1.0 / 2.0 + (1.0 / 6.0) * r;
  const double p45 = 1.0 / 24.0 + (1.0 / 120.0) * r;
  const double p67 = 1.0 / 720.0 + (1.0 / 5040.0) * r;
  const double p89 = 1.0 / 40320.0 + (1.0 / 362880.0) * r;
  const double p1011 = 1.0 / 3628800.0 + (1.0 / 39916800.0) * r;
  const double p12 = 1.0 / 479001600.0;
  const double p03 = p01 + p23 * r2, p47 = p45 + p67 * r2, p811 = p89 + p1011 * r2;
  const double p07 = p03 + p47 * r4, p812 = p811 + p12 * r4;
  const double p = p07 + p812 * r8;
  // the low 12 bits of shifted's bits are n's (two's complement); shifted left by 52 with 1023 added,
  // they are 2^n's exponent field
  const double scale = FromBits((Bits(shifted) + 1023) << 52);
  double y = p * scale;
  y = x < kLo ? 0.0 : y;
  y = x > kHi ? FromBits(0x7ff0000000000000ULL) : y;  // +inf
  return y;
}

// erfcx(a) = exp(a^2) erfc(a) for a >= 0: erfc(a) without its Gaussian factor, which the caller
// computes as exactly as it can. Relative error below 1e-15 (measured against mpmath over [0, 30]);
// erfcx(+inf) = 0.
// With t = 3 / (3 + a), mapping [0, inf] onto [1, 0] (Numerical Recipes' erfc maps a the same way),
// erfcx(a) = t P(t), P smooth on [0, 1] from 1 / (3 sqrt(pi)) at t = 0 (erfcx(a) ~ 1 / (a sqrt(pi))
// as a -> inf) to 1 at t = 1: P is the degree-21 truncation of its Chebyshev expansion on [0, 1]
// (next terms below 7e-17) in powers of t, computed with mpmath at 50 digits.
// Estrin's scheme evaluates it: pairs c_2i + c_2i+1 t, then pairs of those joined by t^2, then by
// t^4, ...: a chain of 5 dependent multiply-adds instead of Horner's 21, which would leave the loops
// waiting on latency (3x slower), for the same accuracy here.
FT_MATH double Erfcx(double a) {
  const double t = 3.0 / (3.0 + a);
  const double t2 = t * t, t4 = t2 * t2, t8 = t4 * t4, t16 = t8 * t8;
  // P(t) = sum over k of c_k t^k, k = 0..21, by Estrin's scheme
  const double q0 = 0.18806319451591869 + 0.18806319451599146 * t;
  const double q1 = 0.17761523925227748 + 0.1567193296525641 * t;
  const double q2 = 0.12711675604269743 + 0.09229101441057751 * t;
  const double q3 = 0.056968822226485784 + 0.026336619425765498 * t;
  const double q4 = 0.003115465087232553 + (-0.0020062510160106495) * t;
  const double q5 = -0.03512483377722702 + 0.08527366860959283 * t;
  const double q6 = -0.25241114948424015 + 0.5578918236854237 * t;
  const double q7 = -0.9440246659536167 + 1.2526163551762364 * t;
  const double q8 = -1.2514844741090727 + 0.9046401657196169 * t;
  const double q9 = -0.45699959272930696 + 0.15333712489256712 * t;
  const double q10 = -0.03081507055921428 + 0.0028172644157412833 * t;
  const double r0 = q0 + q1 * t2, r1 = q2 + q3 * t2, r2 = q4 + q5 * t2, r3 = q6 + q7 * t2, r4 = q8 + q9 * t2;
  const double s0 = r0 + r1 * t4, s1 = r2 + r3 * t4, s2 = r4 + q10 * t4;
  const double p = (s0 + s1 * t8) + s2 * t16;
  return t * p;
}

// The standard normal distribution at x: cdf = Phi(x) = erfc(-x / sqrt 2) / 2, pdf = phi(x) =
// exp(-x^2 / 2) / sqrt(2 pi). For a float x (widened) x^2 / 2 is exact in double, so the Gaussian
// factor exp(-x^2 / 2), shared by both, is within exp()'s error; the tail Phi(-|x|) =
// exp(-x^2 / 2) erfcx(|x| / sqrt 2) / 2 never subtracts from 1, so it keeps its relative accuracy
// far out (error below 1.1e-15, measured against mpmath): Phi(-10) = 7.6e-24, Phi(-37) = 5.7e-300;
// beyond |x| = 37.6 the tail is 0 (and from 37.5 a denormal double).
struct Normal {
  double cdf, pdf;
};

FT_MATH Normal NormalAt(double x) {
  constexpr double kInvSqrt2 = 0.7071067811865476;    // 1 / sqrt(2)
  constexpr double kInvSqrt2Pi = 0.3989422804014327;  // 1 / sqrt(2 pi)
  const double gauss = Exp(-0.5 * (x * x));
  const double absX = x < 0.0 ? -x : x;
  const double tail = 0.5 * gauss * Erfcx(absX * kInvSqrt2);  // Phi(-|x|)
  const double upper = 1.0 - tail;  // Phi(|x|)
  return {x < 0.0 ? tail : upper, kInvSqrt2Pi * gauss};
}

}  // namespace ft::fast_math
