// evt's own elementwise functors for Sm90Compute.
//
// Sm90Compute<ComputeFn, ...> instantiates ComputeFn<Array<ElementCompute, FragmentSize>> and calls
// it with one Array per child, so each functor is a scalar template plus an Array specialization
// that applies it to every element of the fragment (`ForEach`), the way
// cutlass/epilogue/thread/activation.h does it. Every functor computes in float, with the accurate
// libm functions (no fast-math) or, for the exact GELU, a formula of the same accuracy, so
// results match torch's to a few ulp.
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

// 1 / x for x >= 1 (MUFU.RCP, 1 ulp on the device; IEEE division needs a Newton step and a
// slow path).
CUTLASS_HOST_DEVICE float rcp_ge1(float x) {
#if defined(__CUDA_ARCH__)
  return __fdividef(1.0f, x);
#else
  return 1.0f / x;
#endif
}

// The standard normal CDF Phi(z) = erfc(-z / sqrt 2) / 2, branch-free and through erfc for both
// tails: erfc(u) = t exp(-u^2 + P(t)), t = 1 / (1 + u / 2), u = |z| / sqrt 2 (Numerical
// Recipes' erfcc, fractional error below 1.2e-7 for every u >= 0), evaluated in base 2 with log2 e
// and the 1/2 folded into P's coefficients: branch-free, one reciprocal and one exp2.
// Against a float64 reference (tests/test_functors_host.py), gelu(z) = z Phi(z) has relative
// error below 1e-6 for |z| < 3 and 5e-6 down to z = -10, where torch's
// 0.5 z (1 + erf(z / sqrt 2)) loses its digits to cancellation (1e-5 at |z| < 3, all of them
// below z = -5.5 in float32); gelu's derivative has absolute error 2.3e-7 (erff's form: 1.4e-7).
// Speed on the H100 (benchmarks/config_sweep.py against CUTLASS's erff form via --functor):
// GELU's backward in the dgrad GEMM 3-8% faster, the forward the same (within 2%); both stay
// ALU-bound in the epilogue, ~25% behind the tanh form.
CUTLASS_HOST_DEVICE float normal_cdf(float z) {
  float const t = rcp_ge1(fmaf(0.35355339059327376f, fabsf(z), 1.0f));  // 1 / (1 + u / 2)
  float p = 0.246517298f;
  p = fmaf(p, t, -1.18611495f);
  p = fmaf(p, t, 2.14747446f);
  p = fmaf(p, t, -1.63775315f);
  p = fmaf(p, t, 0.402321582f);
  p = fmaf(p, t, -0.26875686f);
  p = fmaf(p, t, 0.139630057f);
  p = fmaf(p, t, 0.539700616f);
  p = fmaf(p, t, 1.4427292f);
  p = fmaf(p, t, -2.82574822f);
  float const half_erfc = t * exp2f(fmaf(-z, z * 0.72134752044448170f, p));  // erfc(u) / 2
  return z < 0.0f ? half_erfc : 1.0f - half_erfc;
}

// The exact (erf) GELU, torch's gelu(approximate="none"): z Phi(z).
EVT_ELEMENTWISE(Gelu, z * normal_cdf(z), float z)

// grad * d/dz gelu(z) for the exact GELU: grad * (Phi(z) + z phi(z)), as torch's
// gelu_backward(approximate="none") computes it; phi(z) = exp(-z^2 / 2) / sqrt(2 pi).
CUTLASS_HOST_DEVICE float gelu_grad(float z) {
  float const pdf = exp2f(-z * z * 0.72134752044448170f) * 0.39894228040143268f;
  return normal_cdf(z) + z * pdf;
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

// grad * d/dz gelu_tanh(z), the derivative of the tanh-approximated GELU, as CUTLASS's dGELU
// computes it (same argument order), with tanh_approx.
CUTLASS_HOST_DEVICE float gelu_tanh_grad(float z) {
  float const t = tanh_approx(0.7978845608028654f * z * (1.0f + 0.044715f * z * z));
  return 0.5f * z * ((1.0f - t * t) * (0.7978845608028654f + 0.1070322243f * z * z)) +
         0.5f * (1.0f + t);
}
EVT_ELEMENTWISE(GeluTanhBackward, grad * gelu_tanh_grad(z), float grad, float z)

// SiLU's backward, as torch's silu_backward: grad * s * (1 + x * (1 - s)) with s = sigmoid(x).
CUTLASS_HOST_DEVICE float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
EVT_ELEMENTWISE(SiluBackward, grad * sigmoid(x) * (1.0f + x * (1.0f - sigmoid(x))),
                float grad, float x)
// sigmoid's and tanh's backwards from the forward output y
EVT_ELEMENTWISE(SigmoidBackward, grad * y * (1.0f - y), float grad, float y)
EVT_ELEMENTWISE(Tanh, tanhf(x), float x)
EVT_ELEMENTWISE(TanhBackward, grad * (1.0f - y * y), float grad, float y)
// ReLU's backward, torch's threshold_backward(grad, x, threshold)
EVT_ELEMENTWISE(ThresholdBackward, x <= threshold ? 0.0f : grad, float grad, float x,
                float threshold)

EVT_ELEMENTWISE(Exp, expf(x), float x)
EVT_ELEMENTWISE(Log, logf(x), float x)
#if defined(__CUDA_ARCH__)
EVT_ELEMENTWISE(Rsqrt, rsqrtf(x), float x)
#else
EVT_ELEMENTWISE(Rsqrt, 1.0f / sqrtf(x), float x)
#endif

// maximum/minimum propagate NaN, as torch.maximum/minimum do (max.NaN.f32 on SM90)
template <class T>
using Maximum = cutlass::maximum<T, true>;
template <class T>
using Minimum = cutlass::minimum<T, true>;

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
