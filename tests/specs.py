"""Hand-built KernelSpecs for the codegen and compile tests (and anyone who needs a fixed kernel).

Inputs follow the ABI: the GEMM operands first, then the epilogue inputs; D is output 0.
"""

from __future__ import annotations

import dataclasses

from evt.ir import (
    AccFetch,
    AuxLoad,
    AuxStore,
    ColBroadcast,
    ColReduction,
    ColumnWelfordStats,
    Compute,
    Gemm,
    KernelSpec,
    Operand,
    RowBroadcast,
    RowReduction,
    ScalarBroadcast,
    ScalarLoad,
    ScalarReduction,
    SoftmaxStats,
    WelfordStats,
)

# y = x @ W.T with W an nn.Linear weight [N, K]: A = x (k-major), B = W passed as [N, K]
LINEAR = Gemm(Operand(0, False, "k"), Operand(1, True, "k"), "bf16")


def mlp_fc1_forward() -> KernelSpec:
    """h = x @ W1.T + b1 (saved for backward), y = gelu(h)."""
    nodes = (
        AccFetch("acc"),
        RowBroadcast("bias", 2, "bf16"),
        Compute("add", "add", ("acc", "bias")),
        AuxStore("save_add", "add", 1, "bf16"),
        Compute("gelu", "gelu", ("add",)),
    )
    return KernelSpec("mlp_fc1_forward", LINEAR, nodes, "gelu", "bf16", 3)


def scaled_by_scalar() -> KernelSpec:
    """D = (x @ W.T) * s, s a 0-d float32 input (a learned scale) read through its pointer."""
    nodes = (AccFetch("acc"), ScalarLoad("s", 2, "f32"), Compute("d", "mul", ("acc", "s"), "bf16"))
    return KernelSpec("evt_scaled", LINEAR, nodes, "d", "bf16", 3)


def mlp_fc1_forward_tf32() -> KernelSpec:
    """mlp_fc1_forward of an fp32 model: fp32 operands multiplied on TF32 tensor cores (both
    K-major, as WGMMA reads TF32), fp32 bias, pre-activation and output."""
    nodes = (
        AccFetch("acc"),
        RowBroadcast("bias", 2, "f32"),
        Compute("add", "add", ("acc", "bias")),
        AuxStore("save_add", "add", 1, "f32"),
        Compute("gelu", "gelu", ("add",)),
    )
    gemm = dataclasses.replace(LINEAR, dtype="f32")
    return KernelSpec("mlp_fc1_forward_tf32", gemm, nodes, "gelu", "f32", 3)


def mlp_fc2_residual() -> KernelSpec:
    """y = h @ W2.T + b2 + residual."""
    nodes = (
        AccFetch("acc"),
        RowBroadcast("bias", 2, "bf16"),
        Compute("add", "add", ("acc", "bias")),
        AuxLoad("residual", 3, "bf16", "n"),
        Compute("add_1", "add", ("add", "residual")),
    )
    return KernelSpec("mlp_fc2_residual", LINEAR, nodes, "add_1", "bf16", 4)


def mlp_fc2_residual_stats() -> KernelSpec:
    """h = h1 @ W2.T + b2 + residual (stored, bf16) and the mean and variance of h's rows over N
    (the next LayerNorm's statistics): the bench's `layernorm_stats` region."""
    nodes = (
        AccFetch("acc"),
        RowBroadcast("bias", 2, "bf16"),
        Compute("add", "add", ("acc", "bias")),
        AuxLoad("residual", 3, "bf16", "n"),
        Compute("h", "add", ("add", "residual"), "bf16"),
        WelfordStats("norm", "h", "f32", mean_output=1, var_output=2, keepdim=(False, False)),
    )
    return KernelSpec("mlp_fc2_residual_stats", LINEAR, nodes, "h", "bf16", 4)


def mlp_dgrad_gelu() -> KernelSpec:
    """grad_h = (grad_y @ W2) * gelu'(z): W2 [K, N] row-major is B n-major, no transpose."""
    gemm = Gemm(Operand(0, False, "k"), Operand(1, False, "n"), "bf16")
    nodes = (
        AccFetch("acc"),
        AuxLoad("z", 2, "bf16", "n"),
        Compute("gelu_backward", "gelu_backward", ("acc", "z")),
    )
    return KernelSpec("mlp_dgrad_gelu", gemm, nodes, "gelu_backward", "bf16", 3)


def layer_norm_backward() -> KernelSpec:
    """LayerNorm's backward in the dgrad GEMM producing its incoming gradient g = grad_y @ W
    (as GPT-2's blocks and the LM head get it): the bias and weight gradients sum g and g * xhat
    over M (two row reductions), the input gradient's per-row sums of g * gamma and
    g * gamma * xhat over N (two column reductions), D = g * gamma * N (fp32)."""
    gemm = Gemm(Operand(0, False, "k"), Operand(1, False, "n"), "bf16")
    nodes = (
        AccFetch("acc"),
        Compute("g", "identity", ("acc",)),
        RowReduction("bias_grad", "g", 4, "f32"),
        RowBroadcast("gamma", 2, "f32"),
        Compute("gg", "mul", ("bias_grad", "gamma")),
        ColReduction("sum_gg", "gg", 1, "f32", keepdim=True),
        ScalarBroadcast("n", 32.0),
        Compute("scaled", "mul", ("sum_gg", "n")),
        AuxLoad("xhat", 3, "f32", "n"),
        Compute("ggx", "mul", ("sum_gg", "xhat")),
        ColReduction("sum_ggx", "ggx", 2, "f32", keepdim=True),
        Compute("gx", "mul", ("bias_grad", "xhat")),
        RowReduction("weight_grad", "gx", 3, "f32"),
    )
    return KernelSpec("layer_norm_backward", gemm, nodes, "scaled", "f32", 4)


def layer_norm_backward_recomputed() -> KernelSpec:
    """`layer_norm_backward` with xhat computed in the epilogue (`recompute_inside`) from the
    bf16 input x and the row statistics: xhat = (float(x) - mean) * rstd, a subtree that reads
    only loads (an aux tensor and two column broadcasts), nothing of the accumulator."""
    base = layer_norm_backward()
    xhat = (
        AuxLoad("x", 3, "bf16", "n"),
        Compute("xf", "identity", ("x",)),
        ColBroadcast("mean", 4, "f32"),
        Compute("centered", "sub", ("xf", "mean")),
        ColBroadcast("rstd", 5, "f32"),
        Compute("xhat", "mul", ("centered", "rstd")),
    )
    nodes = []
    for n in base.nodes:
        nodes += xhat if n.name == "xhat" else (n,)
    return dataclasses.replace(base, name="layer_norm_backward_recomputed", nodes=tuple(nodes),
                               num_inputs=6)  # fmt: skip


def dag_square() -> KernelSpec:
    """A genuine DAG (acc read three times): D = (acc * acc + acc) * 0.5 * scale[m], in f16
    operands with A m-major, a per-row (M-vector) fp32 scale and fp32 D."""
    gemm = Gemm(Operand(0, True, "m"), Operand(1, False, "n"), "f16")
    nodes = (
        AccFetch("acc"),
        Compute("mul", "mul", ("acc", "acc")),
        Compute("add", "add", ("mul", "acc")),
        ScalarBroadcast("half", 0.5),
        Compute("mul_1", "mul", ("add", "half")),
        ColBroadcast("scale", 2, "f32"),
        Compute("mul_2", "mul", ("mul_1", "scale")),
    )
    return KernelSpec("dag_square", gemm, nodes, "mul_2", "f32", 3)


def mlp_dgrad_gelu_bias() -> KernelSpec:
    """mlp_dgrad_gelu plus fc1's bias gradient: db1 = grad_h.sum(0) (a row reduction, [1, N])."""
    spec = mlp_dgrad_gelu()
    nodes = spec.nodes + (RowReduction("bias_grad", "gelu_backward", 1, "bf16", keepdim=True),)
    return KernelSpec("mlp_dgrad_gelu_bias", spec.gemm, nodes, "gelu_backward", "bf16", 3)


def gelu_forms() -> KernelSpec:
    """The exact GELU's 16-bit forms of one pre-activation h = acc + bias, each kept in fp32 (D:
    the bf16 form; aux: h itself and the fp16 form), so that the device's values, the SFU's ex2
    and reciprocal included, can be held to float64 element by element."""
    nodes = (
        AccFetch("acc"),
        RowBroadcast("bias", 2, "bf16"),
        Compute("h", "add", ("acc", "bias")),
        AuxStore("save_h", "h", 1, "f32"),
        Compute("gelu_f16", "gelu_for_f16", ("h",)),
        AuxStore("save_gelu_f16", "gelu_f16", 2, "f32"),
        Compute("gelu_bf16", "gelu_for_bf16", ("h",)),
    )
    return KernelSpec("gelu_forms", LINEAR, nodes, "gelu_bf16", "f32", 3)


def swiglu_backward() -> KernelSpec:
    """SwiGLU's backward in the down projection's dgrad dh = grad @ W (W [K, N] row-major: B
    n-major), as `share_sigmoids` builds it: the gate's gradient silu_backward(dh * up, gate)
    (an aux store) and the up projection's dh * silu(gate) (D), one sigmoid of the gate for both."""
    gemm = Gemm(Operand(0, False, "k"), Operand(1, False, "n"), "bf16")
    nodes = (
        AccFetch("acc"),
        AuxLoad("up", 2, "bf16", "n"),
        Compute("dh_up", "mul", ("acc", "up")),
        AuxLoad("gate", 3, "bf16", "n"),
        Compute("s", "sigmoid", ("gate",)),
        Compute("grad_gate", "silu_backward_sigmoid", ("dh_up", "gate", "s")),
        AuxStore("grad_gate_store", "grad_gate", 1, "bf16"),
        Compute("silu", "mul", ("gate", "s")),
        Compute("grad_up", "mul", ("acc", "silu")),
    )
    return KernelSpec("swiglu_backward", gemm, nodes, "grad_up", "bf16", 4)


def activations() -> KernelSpec:
    """The newer functors in one kernel: a SiLU forward that saves a bool mask (x > 0) and a
    select/compare/math chain reading a saved mask, plus the activation backwards:
    D = where(mask, max(silu(h), exp(sigmoid(h))), rsqrt(tanh(h)^2 + 1))
        * sigmoid_backward(h, y) * tanh_backward(h, y) * threshold_backward(h, y, 0)
        * silu_backward(h, y) - log(min(y, 1) + 2), with h = acc + bias."""
    mul = [Compute(f"m{i}", "mul", (f"m{i - 1}" if i > 1 else "sel", b))
           for i, b in enumerate(("sb", "tb", "rb", "sib"), start=1)]  # fmt: skip
    nodes = (
        AccFetch("acc"),
        RowBroadcast("bias", 2, "bf16"),
        Compute("h", "add", ("acc", "bias")),
        ScalarBroadcast("zero", 0.0),
        Compute("pos", "gt", ("h", "zero")),
        AuxStore("pos_store", "pos", 1, "b8"),
        AuxLoad("mask", 3, "b8", "n"),
        AuxLoad("y", 4, "bf16", "n"),
        Compute("silu", "silu", ("h",)),
        Compute("sg", "sigmoid", ("h",)),
        Compute("e", "exp", ("sg",)),
        Compute("hi", "maximum", ("silu", "e")),
        Compute("t", "tanh", ("h",)),
        Compute("t2", "mul", ("t", "t")),
        ScalarBroadcast("one", 1.0),
        Compute("t2p1", "add", ("t2", "one")),
        Compute("r", "rsqrt", ("t2p1",)),
        Compute("sel", "where", ("mask", "hi", "r")),
        Compute("sb", "sigmoid_backward", ("h", "y")),
        Compute("tb", "tanh_backward", ("h", "y")),
        Compute("rb", "threshold_backward", ("h", "y", "zero")),
        Compute("sib", "silu_backward", ("h", "y")),
        *mul,
        Compute("lo", "minimum", ("y", "one")),
        ScalarBroadcast("two", 2.0),
        Compute("lo2", "add", ("lo", "two")),
        Compute("lg", "log", ("lo2",)),
        Compute("d", "sub", ("m4", "lg")),
    )
    return KernelSpec("activations", LINEAR, nodes, "d", "bf16", 5)


def attention_scores() -> KernelSpec:
    """A batched GEMM (attention's Q·Kᵀ, K passed as [L, N, K]): D = acc * 0.125 + mask + bias
    + pos, with `mask` one [M, N] tensor every batch reads (static L stride 0), `bias` a full
    [L, M, N] tensor and `pos` an N-vector."""
    gemm = Gemm(Operand(0, False, "k"), Operand(1, True, "k"), "bf16", batched=True)
    nodes = (
        AccFetch("acc"),
        ScalarBroadcast("scale", 0.125),
        Compute("mul", "mul", ("acc", "scale")),
        AuxLoad("mask", 2, "bf16", "n", broadcast_l=True),
        Compute("add", "add", ("mul", "mask")),
        AuxLoad("bias", 3, "bf16", "n"),
        Compute("add_1", "add", ("add", "bias")),
        RowBroadcast("pos", 4, "bf16"),
        Compute("add_2", "add", ("add_1", "pos")),
    )
    return KernelSpec("attention_scores", gemm, nodes, "add_2", "bf16", 5)


def nested_attention_scores() -> KernelSpec:
    """Attention's scores with q and k read in place from [B, S, H, D] projections: a nested batch
    L = (B, H), q passed as its [B, H, S, D] view (A, k-major), k likewise (B = kᵀ, k-major).
    D = acc * 0.125 + mask + bias + pos, with `mask` one [S, S] tensor every batch reads (static
    zero batch strides), `bias` a full [B, H, S, S] (or [B * H, S, S]) tensor, `pos` an
    N-vector; the scaled scores are also stored (output 1, [B * H, S, S]): `attention_scores`
    with a nested batch and that store."""
    flat = attention_scores()
    nodes = list(flat.nodes)
    nodes.insert(3, AuxStore("scaled", "mul", 1, "bf16"))  # after the scale
    gemm = dataclasses.replace(flat.gemm, nested=True)
    return KernelSpec("nested_attention_scores", gemm, tuple(nodes), flat.d, flat.d_dtype,
                      flat.num_inputs)  # fmt: skip


def nested_attention_statistics() -> KernelSpec:
    """`nested_attention_scores` plus softmax's statistics of the scores over N (the row max,
    output 2, and the sum of exp, output 3: [B * H, S] each, fp32), as the forward of
    softmax(Q·Kᵀ) with q and k read in place fuses them, and their sum over everything (output
    4, fp32 [])."""
    spec = nested_attention_scores()
    stat = SoftmaxStats("softmax", "add_2", "f32", max_output=2, sum_output=3)
    total = ScalarReduction("total", "add_2", 4, "f32")
    return dataclasses.replace(spec, name="nested_attention_statistics",
                               nodes=(*spec.nodes, stat, total))  # fmt: skip


def nested_attention_values() -> KernelSpec:
    """Attention's P·V with v read in place from a [B, S, H, D] projection: A = the probabilities
    [B * H, S, S] (contiguous), B = v's [B, H, S, D] view (n-major): the nested batch (B, H)
    comes from B. D = acc, bf16, [B * H, S, D]."""
    gemm = Gemm(Operand(0, False, "k"), Operand(1, False, "n"), "bf16", batched=True, nested=True)
    return KernelSpec("nested_attention_values", gemm, (AccFetch("acc"),), "acc", "bf16", 2)


def nested_attention_key_grad() -> KernelSpec:
    """Attention's dK = dSᵀ·Q with q read in place: A = the scores' gradient [B * H, S, S]
    passed untransposed (A = its transpose, m-major), B = q's [B, H, S, D] view (n-major): a
    GEMM without an epilogue, as `free_head_copies` adds. D = acc, bf16, [B * H, S, D]."""
    gemm = Gemm(Operand(0, True, "m"), Operand(1, False, "n"), "bf16", batched=True, nested=True)
    return KernelSpec("nested_attention_key_grad", gemm, (AccFetch("acc"),), "acc", "bf16", 2)


def row_statistics() -> KernelSpec:
    """Every reduction and statistic of bf16 logits = x @ W.T + b (stored as D): softmax's max
    and sum of exp (online softmax), LayerNorm's mean and var (Welford), a sum and a bf16 max over
    N, a max over M and a sum over everything."""
    nodes = (
        AccFetch("acc"),
        RowBroadcast("bias", 2, "bf16"),
        Compute("logits", "add", ("acc", "bias"), "bf16"),
        SoftmaxStats("softmax", "logits", "f32", max_output=1, sum_output=2, keepdim=(True, True)),
        WelfordStats("norm", "logits", "f32", mean_output=3, var_output=4, keepdim=(True, False)),
        ColReduction("row_sum", "logits", 5, "f32"),
        ColReduction("row_max", "logits", 6, "bf16", op="max"),
        RowReduction("col_max", "logits", 7, "f32", op="max"),
        ScalarReduction("total", "logits", 8, "f32"),
    )
    return KernelSpec("row_statistics", LINEAR, nodes, "logits", "bf16", 3)


def batch_statistics() -> KernelSpec:
    """BatchNorm1d's batch statistics of a bias-free Linear's bf16 output h = x @ W.T: the mean
    over M ([1, N]) and the biased var ([N]) in one Welford node over M, and the unbiased var of
    D = h * 2 (another node: a second value)."""
    nodes = (
        AccFetch("acc"),
        Compute("h", "identity", ("acc",), "bf16"),
        ColumnWelfordStats("stats", "h", "f32", mean_output=1, var_output=2, keepdim=(True, False)),
        ScalarBroadcast("two", 2.0),
        Compute("h2", "mul", ("stats", "two")),
        ColumnWelfordStats("stats2", "h2", "bf16", var_output=3, correction=1),
    )
    return KernelSpec("batch_statistics", LINEAR, nodes, "stats2", "bf16", 2)


def batch_statistics_edge_cases() -> KernelSpec:
    """BatchNorm1d's statistics over M of f32 h = acc + special, where `special` (an aux load)
    puts -inf, +inf and NaN into some elements or whole columns (D = h)."""
    nodes = (
        AccFetch("acc"),
        AuxLoad("special", 2, "f32", "n"),
        Compute("h", "add", ("acc", "special")),
        ColumnWelfordStats("stats", "h", "f32", mean_output=1, var_output=2),
    )
    return KernelSpec("batch_statistics_edge_cases", LINEAR, nodes, "stats", "f32", 3)


def batched_row_statistics() -> KernelSpec:
    """attention-like batched scores (acc * 0.125) with logsumexp's statistics (the shift is 0
    where a row's max is infinite) and LayerNorm's unbiased var, per batch, a sum over N and one
    over L and M (a row reduction: its partials span the batches); D = scores - acc (f32) reads
    the accumulator twice, so the visitor is a DAG (Sm90TopologicalVisitor)."""
    gemm = Gemm(Operand(0, False, "k"), Operand(1, True, "k"), "bf16", batched=True)
    nodes = (
        AccFetch("acc"),
        ScalarBroadcast("scale", 0.125),
        Compute("scores", "mul", ("acc", "scale")),
        SoftmaxStats("lse", "scores", "f32", sum_output=1, zero_inf_max=True),
        WelfordStats("var", "scores", "f32", var_output=2, correction=1),
        ColReduction("row_sum", "scores", 3, "f32", keepdim=True),
        RowReduction("col_sum", "scores", 4, "f32"),
        Compute("d", "sub", ("scores", "acc")),
    )
    return KernelSpec("batched_row_statistics", gemm, nodes, "d", "f32", 2)


def statistics_edge_cases() -> KernelSpec:
    """Softmax's, logsumexp's and Welford's statistics of f32 logits = acc + special, where
    `special` (an aux load) puts -inf, +inf and NaN into some elements or whole rows."""
    nodes = (
        AccFetch("acc"),
        AuxLoad("special", 2, "f32", "n"),
        Compute("logits", "add", ("acc", "special")),
        SoftmaxStats("softmax", "logits", "f32", max_output=1, sum_output=2),
        SoftmaxStats("lse", "logits", "f32", sum_output=3, zero_inf_max=True),
        WelfordStats("norm", "logits", "f32", mean_output=4, var_output=5, correction=1),
    )
    return KernelSpec("statistics_edge_cases", LINEAR, nodes, "logits", "f32", 3)



def scaled_scores(nested: bool = False) -> KernelSpec:
    """Attention's scores with nothing a TMA load would need aligned: D = acc * 0.125 + pos (an
    N-vector), the scaled scores also stored (output 1); flat or read in place (L = (B, H)).
    At ViT's 197 tokens both outputs are stored from registers (`TileConfig.store_align`)."""
    gemm = Gemm(Operand(0, False, "k"), Operand(1, True, "k"), "bf16", batched=True, nested=nested)
    nodes = (
        AccFetch("acc"),
        ScalarBroadcast("scale", 0.125),
        Compute("mul", "mul", ("acc", "scale")),
        AuxStore("scaled", "mul", 1, "bf16"),
        RowBroadcast("pos", 2, "bf16"),
        Compute("add", "add", ("mul", "pos")),
    )
    return KernelSpec(f"scaled_scores{'_nested' if nested else ''}", gemm, nodes, "add", "bf16", 3)


def nested_scaled_scores() -> KernelSpec:
    return scaled_scores(nested=True)

ALL = {
    f.__name__: f
    for f in (mlp_fc1_forward, mlp_fc1_forward_tf32, mlp_fc2_residual, mlp_fc2_residual_stats, layer_norm_backward,
              layer_norm_backward_recomputed, mlp_dgrad_gelu, dag_square, mlp_dgrad_gelu_bias,
              activations, gelu_forms, swiglu_backward, attention_scores, row_statistics, batched_row_statistics,
              statistics_edge_cases, nested_attention_scores, nested_attention_statistics,
              batch_statistics, batch_statistics_edge_cases,
              nested_attention_values,
              nested_attention_key_grad)
}  # fmt: skip
