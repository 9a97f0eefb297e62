// evt's own elementwise functors for Sm90Compute.
//
// Sm90Compute<ComputeFn, ...> instantiates ComputeFn<Array<ElementCompute, FragmentSize>> and calls
// it with one Array per child, so each functor is a scalar template plus an Array specialization
// that loops over the fragment, the way cutlass/epilogue/thread/activation.h does it.
#pragma once

#include "cutlass/array.h"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/thread/activation.h"

namespace evt {

// grad * d/dz gelu(z) for the exact (erf) GELU: grad * (Phi(z) + z * phi(z)), as torch's
// gelu_backward(approximate="none") computes it. Arguments: (grad, z).
template <class T>
struct GeluBackward {
  static constexpr bool kIsHeavy = true;

  CUTLASS_HOST_DEVICE
  T operator()(T const& grad, T const& z) const {
    float const x = static_cast<float>(z);
    float const cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));  // Phi(z)
    float const pdf = expf(-0.5f * x * x) * 0.39894228040143268f;       // phi(z)
    return static_cast<T>(static_cast<float>(grad) * (cdf + x * pdf));
  }
};

template <class T, int N>
struct GeluBackward<cutlass::Array<T, N>> {
  static constexpr bool kIsHeavy = true;

  CUTLASS_HOST_DEVICE
  cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& grad,
                                  cutlass::Array<T, N> const& z) const {
    cutlass::Array<T, N> y;
    GeluBackward<T> op;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) {
      y[i] = op(grad[i], z[i]);
    }
    return y;
  }
};

// grad * d/dz gelu_tanh(z), the derivative of the tanh-approximated GELU. CUTLASS's dGELU computes
// exactly this with the same (grad, z) argument order (tanh via fast_tanh, i.e. tanh.approx.f32),
// and has its own Array specialization.
template <class T>
struct GeluTanhBackward : cutlass::epilogue::thread::dGELU<T> {};

}  // namespace evt
