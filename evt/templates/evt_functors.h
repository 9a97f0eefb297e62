// evt's own elementwise functors for Sm90Compute.
//
// Sm90Compute<ComputeFn, ...> instantiates ComputeFn<Array<ElementCompute, FragmentSize>> and calls
// it with one Array per child, so each functor is a scalar template plus an Array specialization
// that applies it to every element of the fragment (`ForEach`), the way
// cutlass/epilogue/thread/activation.h does it. Every functor computes in float. Exponentials and
// reciprocals go straight to the SFU (MUFU.EX2 / MUFU.RCP, as Triton's exp and torch.compile's
// kernels do): libm's wrappers around them cost a GEMM epilogue more instructions than the
// function itself. tanh and log stay libm's (their SFU forms lose digits); the exact GELU has
// its own formula of float32's accuracy.
#pragma once

#include "cutlass/array.h"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/functional.h"

namespace evt {

// The Array specialization of an elementwise functor Op: Op<T> on each element of the fragments.
template <template <class> class Op, class T, int N>
struct ForEach {
  static constexpr bool kIsHeavy = true;

  template <class... Args>
  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(Args const&... args) const {
    cutlass::Array<T, N> y;
    Op<T> op;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) {
      y[i] = op(args[i]...);
    }
    return y;
  }
};

// Declares `template <class T> struct NAME` computing EXPR from float arguments ARGS..., and its
// Array specialization.
#define EVT_ELEMENTWISE(NAME, EXPR, ...)                                         \
  template <class T>                                                             \
  struct NAME {                                                                  \
    static constexpr bool kIsHeavy = true;                                       \
    template <class... Ts>                                                       \
    CUTLASS_HOST_DEVICE T operator()(Ts const&... xs) const {                    \
      return static_cast<T>(apply(static_cast<float>(xs)...));                   \
    }                                                                            \
    CUTLASS_HOST_DEVICE static float apply(__VA_ARGS__) { return EXPR; }         \
  };                                                                             \
  template <class T, int N>                                                      \
  struct NAME<cutlass::Array<T, N>> : ForEach<NAME, T, N> {};

// 2^x and 1 / x as the SFU computes them (MUFU.EX2: relative error 2^-22; MUFU.RCP: 1 ulp;
// subnormal inputs and results flushed to zero). libm's exp2f and expf and IEEE division wrap
// the same instruction in range reduction and subnormal fix-ups: in the GELU epilogue's SASS that
// was 3 compares and 3-4 multiplies per exp2f, a third of the epilogue's instructions, and the
// epilogue's instruction count is what a GEMM with a small K waits for. The host (tests) uses libm.
CUTLASS_HOST_DEVICE float exp2_approx(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}

CUTLASS_HOST_DEVICE float rcp_approx(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return 1.0f / x;
#endif
}

// maximum / minimum propagating NaN, as torch.maximum / torch.amax do: max.NaN.f32, one
// instruction (CUTLASS's maximum<float, true> issues it as `asm volatile`, which pins it between
// the epilogue's barriers and TMA instructions, like tanh below).
CUTLASS_HOST_DEVICE float max_nan(float a, float b) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
#else
  return (a > b || a != a) ? a : b;
#endif
}

CUTLASS_HOST_DEVICE float min_nan(float a, float b) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
#else
  return (a < b || a != a) ? a : b;
#endif
}

// e^x as exp2(x log2 e): the rounding of x log2 e adds |x| 1e-7 to the relative error (1e-6 at
// |x| = 10), as Triton's exp (torch.compile's kernels) computes it.
CUTLASS_HOST_DEVICE float exp_approx(float x) { return exp2_approx(x * 1.4426950408889634f); }

// The standard normal distribution's lower tail and density at z, for the float32 GELU and every
// GELU backward:
//   tail = Phi(-|z|) = erfc(|z| / sqrt 2) / 2 = t e Q(t),  t = 1 / (1 + C |z|),  e = exp(-z^2 / 2)
// with Q a polynomial of degree 5 (C 0.28) fitted by scripts/fit_normal_tail.py (which prints its
// coefficients and errors) to the tail's error relative to max(tail, 1e-2): in float64 3.3e-8
// absolute for every z, 1.9e-7 relative at |z| < 3 and 7.3e-5 at |z| < 5, each below torch's
// float32 formula's, 0.5 (1 + erf(z / sqrt 2)), which cancels where Phi is small (2e-4 relative
// at |z| < 3, 0.2 at |z| < 5, all digits below z = -5.5). Degree 8 reached 1.7e-7 relative
// everywhere at three multiply-adds more per element, which a GEMM epilogue at K <= 1024 waits
// for (bias + GELU at K = 768: 5% slower). GELU's backward always takes this fit: its derivative
// crosses zero (z = -0.75), where only an absolute error this small keeps grad * gelu'(z) as
// exact as torch's. The density shares the tail's exp: GELU's backward takes one exp2 and one
// reciprocal per element (the Numerical Recipes erfc, t exp(-u^2 + P(t)), takes two exp2).
// Against float64 (tests/test_functors_host.py, libm's exp2 for the SFU's) the float32 gelu has
// relative error below 6e-7 for |z| < 3 and 1e-4 for |z| < 5, its derivative absolute error
// 1.9e-7, below torch's float32 gelu_backward's (2.1e-7) on each of z < -3, -3..0, 0..3, z > 3
// (3e-8 against 1e-7 at z < -3, where its 0.5 + sign(z) (0.5 + r) cancels).
struct NormalTail {
  float tail;  // Phi(-|z|) = e tq
  float e;     // exp(-z^2 / 2)
  float tq;    // t Q(t)
};

// a polynomial by Horner's rule, coefficients from the highest degree down
CUTLASS_HOST_DEVICE float horner(float, float q) { return q; }
template <class... Rest>
CUTLASS_HOST_DEVICE float horner(float t, float q, float next, Rest... rest) {
  return horner(t, fmaf(q, t, next), rest...);
}

CUTLASS_HOST_DEVICE NormalTail normal_tail(float z) {
  float const e = exp2_approx(-0.72134752044448170f * z * z);  // log2(e) / 2
  float const t = rcp_approx(fmaf(0.28f, fabsf(z), 1.0f));
  float const q = horner(t, -1.068262401e-01f, 3.942018720e-01f, -2.442924314e-01f,
                         2.750126889e-01f, 6.496798009e-02f, 1.169361579e-01f);
  float const tq = t * q;
  return {tq * e, e, tq};
}

// Phi(z) from its tail Phi(-|z|)
CUTLASS_HOST_DEVICE float normal_cdf(float tail, float z) { return z < 0.0f ? tail : 1.0f - tail; }

// The dtype a GELU's result is rounded to, for the fit of its tail (normal_tail_exp2)
enum class TailFit { BF16, F16 };

// Phi(-x) = 2^P(x) for 0 <= x <= 13, the tail of a GELU whose result the graph rounds to bf16 or
// fp16: P fitted to log2 Phi(-x) (scripts/fit_normal_tail.py --form exp2), so the tail's error
// relative to itself is the same at every x, with P evaluated in float32: bf16 (degree 8) 1.4e-4,
// 3.6% of its unit roundoff (2^-8); fp16 (degree 10) 3.8e-5, 7.8% of 2^-11. The forward's error
// is relative: z Phi(z) = z tail below 0, z (1 - tail) above, Phi >= 1/2 there; eager rounds the
// result to the dtype, so every value the epilogue computes from it stays nearer the exact GELU
// than eager's. Beyond x = 13 the tail is below float32's smallest normal (2^-126.9):
// ex2.approx.ftz flushes it to 0, as the t form's exp does from 13.2.
template <TailFit Fit>
CUTLASS_HOST_DEVICE float normal_tail_exp2(float x) {
  if constexpr (Fit == TailFit::BF16) {
    return exp2_approx(horner(x, 2.860469899e-08f, -1.801150337e-06f, 4.891808992e-05f,
                              -7.573352268e-04f, 7.493295468e-03f, -5.102522099e-02f,
                              -4.624555007e-01f, -1.149219004e+00f, -1.000167427e+00f));
  } else {
    return exp2_approx(horner(x, 5.819735134e-11f, -5.841803084e-09f, 2.526602591e-07f,
                              -6.290078732e-06f, 1.013572488e-04f, -1.127763165e-03f,
                              9.062416345e-03f, -5.480961400e-02f, -4.578313351e-01f,
                              -1.151426907e+00f, -9.999875543e-01f));
  }
}

// The exact GELU for a 16-bit result as max(z, 0) - x Phi(-x), x = min(|z|, 13): z (1 - tail)
// above 0, z tail below, one multiply-add for both sides (x = |z| wherever the tail is not
// flushed to 0, and finite, so z = +inf gives inf; -inf gives 0 on the device, where the SFU
// flushes the tail at x = 13: GELU's limit, where torch's 0.5 z (1 + erf) gives NaN; max.NaN
// keeps a NaN z NaN). In a small-K GEMM's epilogue every
// instruction an element counts, the SFU's as one, and so does the dependent chain's length
// (session 48, config_sweep --functor at K = 768 and 1024 on an H200, fraction of cuBLAS's
// GEMM in one process: this form, 12 instructions an element for bf16, and session 47's t form,
// 14 with two SFU but a shorter chain, ran within 3% of each other either way, 0.72-0.86 of the
// GEMM; P by Estrin's scheme, 2 more, ran 3-4% slower; the fp16 form, 14, 3-5% slower; the tanh
// GELU's ~6, 0.82-0.96). This form's gain is its accuracy: 1.4e-4 relative for bf16 against the
// t form's 2.3e-4, 3.8e-5 for fp16 against 4.9e-5. 14 instructions for fp16.
template <TailFit Fit>
CUTLASS_HOST_DEVICE float gelu_16_bit(float z) {
  float const x = fminf(fabsf(z), 13.0f);
  return fmaf(-x, normal_tail_exp2<Fit>(x), max_nan(z, 0.0f));
}

// The exact (erf) GELU, torch's gelu(approximate="none"): z Phi(z); GeluForBf16 / GeluForF16
// where the graph rounds its result to bf16 / fp16.
EVT_ELEMENTWISE(Gelu, z * normal_cdf(normal_tail(z).tail, z), float z)
EVT_ELEMENTWISE(GeluForBf16, gelu_16_bit<TailFit::BF16>(z), float z)
EVT_ELEMENTWISE(GeluForF16, gelu_16_bit<TailFit::F16>(z), float z)

// grad * d/dz gelu(z) for the exact GELU: grad * (Phi(z) + z phi(z)), as torch's
// gelu_backward(approximate="none") computes it; phi(z) = exp(-z^2 / 2) / sqrt(2 pi). With
// r = e (|z| / sqrt(2 pi) - tQ(t)) it is 1 + r where z >= 0 and -r where z < 0, that is
// 0.5 + sign(z) (0.5 + r): sign(z) is one LOP3 on z's sign bit (so -0 takes the branch of
// negative z, consistently), the rest three FFMA, one instruction fewer than selecting 1 - tail
// with a compare (ptxas: FSETP, a predicated FADD and an FMUL for z e).
CUTLASS_HOST_DEVICE float gelu_grad(float z) {
  NormalTail const n = normal_tail(z);
  float const half_plus_r = fmaf(n.e, fmaf(fabsf(z), 0.39894228040143268f, -n.tq), 0.5f);
  return fmaf(copysignf(1.0f, z), half_plus_r, 0.5f);
}
EVT_ELEMENTWISE(GeluBackward, grad * gelu_grad(z), float grad, float z)

// tanh.approx.f32 (SM75+, max relative error 2^-10.99, below bf16/fp16 rounding), what CUTLASS's
// fast_tanh computes, but without `asm volatile`: a volatile asm statement may not be moved past
// any other volatile asm (the epilogue's barriers and TMA instructions), which serializes the
// epilogue around every tanh.
CUTLASS_HOST_DEVICE float tanh_approx(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#else
  return tanhf(x);
#endif
}

// tanh-approximated GELU, torch's gelu(approximate="tanh"): 0.5 z (1 + tanh(k0 (z + k1 z^3))),
// the same arithmetic as CUTLASS's GELU_taylor<float>.
EVT_ELEMENTWISE(GeluTanh,
                0.5f * (z + z * tanh_approx(z * (0.7978845608028654f + 0.0356774081f * z * z))),
                float z)

// grad * d/dz gelu_tanh(z), the derivative of the tanh-approximated GELU, with tanh_approx:
//   t = tanh(k0 (z + k1 z^3)),  d/dz = 0.5 (1 + t) + z (1 - t^2) (k0 / 2) (1 + 3 k1 z^2),
// the constants folded (k0 k1, k0 / 2, 3 k0 k1 / 2) so that each step is one FMUL or FFMA: 4 FMUL
// and 5 FFMA an element against 8 and 4 plus an FADD in CUTLASS's dGELU order, the same values
// to fp32 rounding.
CUTLASS_HOST_DEVICE float gelu_tanh_grad(float z) {
  float const z2 = z * z;
  float const t = tanh_approx(z * fmaf(0.0356774081f, z2, 0.7978845608028654f));
  float const slope = fmaf(0.0535161122f, z2, 0.3989422804014327f);  // (k0 / 2) (1 + 3 k1 z^2)
  return fmaf(z * fmaf(-t, t, 1.0f), slope, fmaf(0.5f, t, 0.5f));
}
EVT_ELEMENTWISE(GeluTanhBackward, grad * gelu_tanh_grad(z), float grad, float z)

// 1 / (1 + e^-x): 1 + e^-x >= 1, so the SFU reciprocal is exact to 1 ulp (x -> -inf: 1 / inf = 0)
CUTLASS_HOST_DEVICE float sigmoid(float x) { return rcp_approx(1.0f + exp_approx(-x)); }
EVT_ELEMENTWISE(Sigmoid, sigmoid(x), float x)
EVT_ELEMENTWISE(Silu, x * sigmoid(x), float x)
// SiLU's backward, as torch's silu_backward: grad * s * (1 + x * (1 - s)) with s = sigmoid(x),
// computed once: the compiler does not merge two calls (their ex2 and rcp are asm statements),
// and before session 48 this functor took two of each an element
CUTLASS_HOST_DEVICE float silu_grad(float x, float s) { return s * (1.0f + x * (1.0f - s)); }
EVT_ELEMENTWISE(SiluBackward, grad * silu_grad(x, sigmoid(x)), float grad, float x)
// the same from s = sigmoid(x) computed by a node of its own, which a SiLU of the same x shares
// (SwiGLU's backward: evt.codegen.tree.share_sigmoids): no exp or reciprocal of its own
EVT_ELEMENTWISE(SiluBackwardFromSigmoid, grad * silu_grad(x, s), float grad, float x, float s)
// sigmoid's and tanh's backwards from the forward output y
EVT_ELEMENTWISE(SigmoidBackward, grad * y * (1.0f - y), float grad, float y)
EVT_ELEMENTWISE(Tanh, tanhf(x), float x)
EVT_ELEMENTWISE(TanhBackward, grad * (1.0f - y * y), float grad, float y)
// ReLU's backward, torch's threshold_backward(grad, x, threshold)
EVT_ELEMENTWISE(ThresholdBackward, x <= threshold ? 0.0f : grad, float grad, float x,
                float threshold)

EVT_ELEMENTWISE(Exp, exp_approx(x), float x)
EVT_ELEMENTWISE(Log, logf(x), float x)
#if defined(__CUDA_ARCH__)
EVT_ELEMENTWISE(Rsqrt, rsqrtf(x), float x)
#else
EVT_ELEMENTWISE(Rsqrt, 1.0f / sqrtf(x), float x)
#endif

EVT_ELEMENTWISE(Maximum, max_nan(a, b), float a, float b)
EVT_ELEMENTWISE(Minimum, min_nan(a, b), float a, float b)

// Comparisons give 1 or 0 (a mask as the epilogue holds it); Where(cond, a, b) picks a where cond
// is not 0. A comparison with NaN is false (NotEqual: true), as in torch.
EVT_ELEMENTWISE(Greater, a > b ? 1.0f : 0.0f, float a, float b)
EVT_ELEMENTWISE(GreaterEqual, a >= b ? 1.0f : 0.0f, float a, float b)
EVT_ELEMENTWISE(Less, a < b ? 1.0f : 0.0f, float a, float b)
EVT_ELEMENTWISE(LessEqual, a <= b ? 1.0f : 0.0f, float a, float b)
EVT_ELEMENTWISE(Equal, a == b ? 1.0f : 0.0f, float a, float b)
EVT_ELEMENTWISE(NotEqual, a != b ? 1.0f : 0.0f, float a, float b)
EVT_ELEMENTWISE(Where, cond != 0.0f ? a : b, float cond, float a, float b)

#undef EVT_ELEMENTWISE

}  // namespace evt
