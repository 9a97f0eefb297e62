"""Running kernels: the `evt::fused_gemm` custom op, the reference interpreter, the kernel cache."""
