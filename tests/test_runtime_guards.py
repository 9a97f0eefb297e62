"""Launch guards as a pure function of shapes, strides, dtypes and data pointers (CPU tensors)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from evt import ir
from evt.errors import LaunchError
from evt.runtime import guards
from tests import specs
from tests.runtime_fakes import fc1_inputs, fc1_spec

M, K, N = 64, 32, 48


def check(spec: ir.KernelSpec, tensors, pad_rows: bool = False) -> guards.Problem:
    return guards.check(spec, [guards.TensorInfo.of(t) for t in tensors], pad_rows=pad_rows)


def reason(spec: ir.KernelSpec, tensors) -> str:
    with pytest.raises(LaunchError) as info:
        check(spec, tensors)
    return str(info.value)


def test_good_inputs_give_cutlass_strides():
    p = check(fc1_spec(), fc1_inputs(M, K, N))
    assert (p.M, p.N, p.K, p.L) == (M, N, K, 1)
    # A = x (M, K, L); B = W as N x K: (N, K, L); bias: (0, N-stride, 0)
    assert p.input_strides == (K, 1, 0, K, 1, 0, 0, 1, 0)
    assert p.output_strides == (N, 1, 0, N, 1, 0)  # D and the saved pre-activation


def test_misaligned_storage_offset_from_narrow():
    x, w, b = fc1_inputs(M, K + 8, N)
    x = x.narrow(1, 1, K)  # storage offset of one bf16 element
    w = w.narrow(1, 0, K)
    assert "16-byte" in reason(fc1_spec(), [x, w, b]) and "input 0 (A)" in reason(
        fc1_spec(), [x, w, b]
    )


def test_misaligned_split_of_a_bias():
    x, w, _ = fc1_inputs(M, K, N)
    _, bias = torch.randn(N + 1).to(torch.bfloat16).split([1, N])
    assert "input 2 (row broadcast bias)" in reason(fc1_spec(), [x, w, bias])


def test_wrong_major():
    x, w, b = fc1_inputs(M, K, N)
    x_m_major = x.t().contiguous().t()  # same values, unit stride along M
    msg = reason(fc1_spec(), [x_m_major, w, b])
    assert "input 0 (A)" in msg and "stride along K" in msg and "k-major" in msg


def test_wrong_dtype():
    x, w, b = fc1_inputs(M, K, N)
    msg = reason(fc1_spec(), [x.float(), w, b])
    assert "torch.float32" in msg and "bf16" in msg


def test_row_stride_not_a_multiple_of_16_bytes():
    x, w, b = fc1_inputs(M, K + 1, N)
    msg = reason(fc1_spec(), [x.narrow(1, 0, K), w.narrow(1, 0, K), b])
    assert "stride along M is 33 elements (66 bytes)" in msg


def test_contiguous_extent_must_fill_16_bytes():
    x, w, b = (t.narrow(-1, 0, 12) if t.dim() == 2 else t for t in fc1_inputs(M, 16, N))
    assert "K = 12 is not a multiple of 8 bf16" in reason(fc1_spec(), [x, w, b])
    assert "output 0: N = 12" in reason(fc1_spec(), fc1_inputs(M, K, 12))
    assert check(fc1_spec(), fc1_inputs(M, K, 12), pad_rows=True).N == 12  # into padded rows


def test_shapes_must_agree():
    x, w, b = fc1_inputs(M, K, N)
    assert "input 1 (B)" in reason(fc1_spec(), [x, w[:, :16], b])
    assert "input 2 (row broadcast bias)" in reason(fc1_spec(), [x, w, b[:40]])
    assert "3 inputs, the kernel takes 4" in reason(specs.mlp_fc2_residual(), [x, w, b])
    assert "empty problem" in reason(fc1_spec(), fc1_inputs(0, K, N))


def test_several_devices():
    infos = [guards.TensorInfo.of(t) for t in fc1_inputs(M, K, N)]
    infos[1] = dataclasses.replace(infos[1], device="cuda:1")
    with pytest.raises(LaunchError, match="several devices"):
        guards.check(fc1_spec(), infos)


def test_size_one_modes_pass_zero_strides():
    x, w, b = fc1_inputs(1, K, N)
    assert check(fc1_spec(), [x, w, b]).input_strides[:3] == (0, 1, 0)


def test_aux_load_and_col_broadcast():
    x, w, b = fc1_inputs(M, K, N)
    residual = torch.randn(M, N).to(torch.bfloat16)
    p = check(specs.mlp_fc2_residual(), [x, w, b, residual])
    assert p.input_strides[9:] == (N, 1, 0)
    msg = reason(specs.mlp_fc2_residual(), [x, w, b, residual.t().contiguous().t()])
    assert "input 3 (aux load residual)" in msg and "n-major" in msg

    a = torch.randn(K, M).to(torch.float16)  # A m-major, passed transposed
    bm = torch.randn(K, N).to(torch.float16)
    for scale in (torch.randn(M), torch.randn(M, 1)):
        assert check(specs.dag_square(), [a, bm, scale]).input_strides[6:] == (1, 0, 0)
    assert "col broadcast scale" in reason(specs.dag_square(), [a, bm, torch.randn(1, M)])


def test_static_reasons(monkeypatch):
    assert guards.static_reason(fc1_spec()) is None
    precision = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        assert "fp32 needs TF32 kernels" in guards.static_reason(fc1_spec(dtype="f32"))
        torch.set_float32_matmul_precision("high")
        monkeypatch.delenv("EVT_TF32", raising=False)
        assert "EVT_TF32=1" in guards.static_reason(fc1_spec(dtype="f32"))
        monkeypatch.setenv("EVT_TF32", "1")
        assert guards.static_reason(specs.mlp_fc1_forward_tf32()) is None
        tf32 = fc1_spec(dtype="f32")
        mn = dataclasses.replace(tf32.gemm.a, major="m", transposed=True)
        why = guards.static_reason(dataclasses.replace(tf32, gemm=dataclasses.replace(tf32.gemm, a=mn)))
        assert "both operands K-major (A is m-major)" in why, why
    finally:
        torch.set_float32_matmul_precision(precision)
    spec = fc1_spec()
    store = dataclasses.replace(spec.nodes[3], major="m")
    m_store = dataclasses.replace(spec, nodes=(*spec.nodes[:3], store, *spec.nodes[4:]))
    assert "m-major" in guards.static_reason(m_store)


def test_shape_reason_decides_at_compile_time_for_cuda_shapes_only():
    """A region whose kernel could never take its static shapes is not formed (see
    test_a_region_that_cannot_take_its_shapes_is_not_formed); CPU values run the reference path
    by design, so they never veto; "meta" stands for CUDA (the bench's capture)."""
    spec = fc1_spec()
    cpu = fc1_inputs(M, K, N)
    meta = [t.to("meta") for t in cpu]
    assert guards.shape_reason(spec, cpu) is None
    assert guards.shape_reason(spec, meta) is None
    odd = [t.to("meta") for t in fc1_inputs(M, K + 4, N)]  # K = 36 bf16: 72 bytes per row
    assert "not a multiple of 16 bytes" in guards.shape_reason(spec, odd)
    assert guards.shape_reason(spec, odd[:1] + [None] + odd[2:]) is None  # not a tensor: unknown


def test_a_region_that_cannot_take_its_shapes_is_not_formed(monkeypatch):
    """Operands whose rows are not whole 16-byte vectors cannot be loaded by TMA: on CUDA (here
    "meta") such a GEMM anchors no region, with that reason, instead of falling back at every
    launch (an aux tensor of that kind stays outside the epilogue from the start:
    `graph/layouts.py`).
    ViT's 197-token attention scores form a region as GPT-2's 1024-token scores do: its outputs
    stored into padded rows, its causal mask computed in the epilogue from two index vectors
    (`float_index_masks`), or with `EVT_INDEX_MASKS=0` its 197-byte bool mask read from a copy
    with padded rows (`guards.copy_into_rows`): the mask's `where` is in the epilogue either way."""
    import warnings

    import torch.nn.functional as F

    import evt
    from evt.bench import ops, plan
    from evt.runtime import dispatch

    cases = {c.name: c for c in plan.all_cases()}

    def capture(fn, *inputs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return evt.explain(fn, *inputs)

    def case(name):
        w = ops.build(cases[name], torch.bfloat16, "meta")
        return capture(w.target, *w.make_inputs(0))

    assert len(case("attention_scores/gpt2").regions) == 1
    (vit,) = case("attention_scores/vit").regions  # 197 x 197 bf16 scores: rows padded to 208
    assert any(isinstance(n, ir.Compute) and n.op == "ge" for n in vit.spec.nodes)  # the mask
    monkeypatch.setenv("EVT_INDEX_MASKS", "0")
    (loaded,) = case("attention_scores/vit").regions
    assert any(isinstance(n, ir.AuxLoad) and n.dtype == "b8" for n in loaded.spec.nodes)
    monkeypatch.delenv("EVT_INDEX_MASKS")
    config = dispatch.config_for(vit.spec, vit.problem)
    assert config.store_align == 0 and config.pad_rows

    def linear_relu(x, w, b):
        return F.relu(F.linear(x, w, b))

    x, w, b = (torch.randn(*s, device="meta", dtype=torch.bfloat16)
               for s in ((256, 100), (64, 100), (64,)))  # K = 100: 200-byte rows  # fmt: skip
    report = capture(linear_relu, x, w, b)
    assert report.regions == []
    ((_, side, why),) = report.unfused
    assert side == "forward" and "TMA cannot read its operand A" in why and "(100, 1)" in why, why


def test_outputs_stored_from_registers_need_n_a_multiple_of_their_vector():
    """A kernel that stores its outputs from registers (`TileConfig.store_align`) takes any N
    its vector divides; one that stores through TMA into padded rows (`TileConfig.pad_rows`)
    any N; any other needs 16-byte rows; at compile time (`store_align=None`) an output's N
    never vetoes a region (the heuristic pads the rows)."""
    x, w, b = fc1_inputs(M, K, 50)  # 100-byte rows
    infos = [guards.TensorInfo.of(t) for t in (x, w, b)]
    with pytest.raises(LaunchError, match="output 0: N = 50 is not a multiple of 8 bf16"):
        guards.check(fc1_spec(), infos)
    problem = guards.check(fc1_spec(), infos, pad_rows=True)
    assert problem.N == 50 and problem.output_strides[:2] == (64, 1)
    assert guards.check(fc1_spec(), infos, store_align=2).N == 50
    with pytest.raises(LaunchError, match="N = 50 is not a multiple of 4, the elements"):
        guards.check(fc1_spec(), infos, store_align=4)
    assert guards.check(fc1_spec(), infos, store_align=None).N == 50
    assert guards.shape_reason(fc1_spec(), [t.to("meta") for t in (x, w, b)]) is None


def test_an_fp32_gemm_region_is_not_formed_on_cuda(monkeypatch):
    """fp32 operands need TF32 kernels, which evt runs only where torch would (and EVT_TF32=1
    opts in): by default on CUDA ("meta") such a region stays unfused with that reason (SDPA's math decomposition on "meta" made the bench's
    prebuild compile fp32 attention kernels that could never run); on the CPU it is formed (the
    reference path runs it)."""
    import warnings

    import evt

    def f(x, w, b):
        return torch.relu(torch.nn.functional.linear(x, w, b))

    def capture(device):
        args = [torch.randn(s, device=device) for s in ((64, 32), (48, 32), (48,))]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return evt.explain(f, *args)

    assert len(capture("cpu").regions) == 1
    meta = capture("meta")
    assert meta.regions == []
    ((_, _, why),) = meta.unfused
    assert "cannot take these shapes" in why and "fp32" in why, why
    precision = torch.get_float32_matmul_precision()
    try:  # opted in to TF32 kernels where torch allows TF32: the forward GEMM is fused
        torch.set_float32_matmul_precision("high")
        monkeypatch.setenv("EVT_TF32", "1")
        assert len(capture("meta").regions) == 1
    finally:
        torch.set_float32_matmul_precision(precision)


def test_an_aux_tensor_tma_cannot_read_is_loaded_from_a_padded_copy():
    """On CUDA ("meta"), an N-major [M, N] input whose rows or strides are not whole 16-byte
    vectors is still an aux load: the launch copies it into rows padded to 32-byte sectors
    (`guards.copy_into_rows`, ViT's 197 x 197 bool mask); an M-major one TMA cannot read is not
    (the op reading it stays out of the epilogue). The copy holds the same values, is marked so
    the guards waive its row extent, and the compile-time check sees what the launch will."""
    from evt.graph.layouts import load_kind

    def val(rows, cols, dtype, device="meta", row_stride=None):
        t = torch.empty(rows, row_stride or cols, dtype=dtype, device=device)
        return t[:, :cols]

    assert load_kind(val(64, 64, torch.bool), 64, 64) == "aux_load"
    assert load_kind(val(64, 60, torch.bool), 64, 60) == "aux_load"  # 60-byte rows: copied
    assert load_kind(val(64, 64, torch.bfloat16, row_stride=68), 64, 64) == "aux_load"
    assert load_kind(val(64, 68, torch.bfloat16).t(), 68, 64) is None  # M-major, 136-byte stride
    assert load_kind(val(64, 72, torch.bfloat16).t(), 72, 64) == "aux_load"

    mask_spec = ir.KernelSpec("masked", ir.Gemm(ir.Operand(0, False, "k"), ir.Operand(1, True, "k"), "bf16"),
                              (ir.AccFetch("acc"), ir.AuxLoad("mask", 2, "b8", "n"),
                               ir.ScalarBroadcast("zero", 0.0),
                               ir.Compute("masked", "where", ("mask", "zero", "acc"))),
                              "masked", "bf16", 3)  # fmt: skip
    a, b = torch.randn(197, 64).bfloat16(), torch.randn(197, 64).bfloat16()
    mask = torch.rand(197, 197) > 0.5
    infos = [guards.TensorInfo.of(t) for t in (a, b, mask)]
    with pytest.raises(LaunchError, match="stride along M is 197"):
        guards.check(mask_spec, infos, store_align=None)
    (same_a, same_b, copy) = guards.copy_into_rows(mask_spec, [a, b, mask])
    assert same_a is a and same_b is b and torch.equal(copy, mask) and copy.stride() == (224, 1)
    assert guards.TensorInfo.of(copy).padded and not guards.TensorInfo.of(mask).padded
    guards.check(mask_spec, [guards.TensorInfo.of(t) for t in (a, b, copy)], store_align=None)
    assert guards.copy_into_rows(mask_spec, [a, b, copy]) is None  # already a padded copy
    assert guards.copy_into_rows(mask_spec, [a, b, torch.rand(197, 208) > 0.5]) is None  # readable
    metas = [t.to("meta") for t in (a, b, mask)]
    assert guards.shape_reason(mask_spec, metas) is None


def test_an_input_laid_out_against_the_kernel_is_copied_into_its_rows():
    """Inductor may hand a region a value it computed in another order than the graph's
    (PatchTST's BatchNorm backward: the dgrad GEMM's A column-major, session 53). An input the
    kernel reads along its last dimension (A k-major, B n-major or transposed k-major, an N-major
    aux load) whose last dimension is not unit-stride is copied into rows; the guards then pass
    on the copy, which holds the same values. An input laid out as the kernel reads it is not."""
    spec = specs.mlp_fc2_residual()  # A k-major, B transposed k-major, bias, aux residual n-major
    x, w, b = fc1_inputs(M, K, N)
    residual = torch.randn(M, N).bfloat16()
    assert guards.copy_into_rows(spec, [x, w, b, residual]) is None
    assert guards.against_layout(spec, [x, w, b, residual]) == []
    turned = [x.t().contiguous().t(), w.t().contiguous().t(), b, residual.t().contiguous().t()]
    load = next(n.name for n in spec.nodes if isinstance(n, ir.AuxLoad))
    assert [t.split(" with")[0] for t in guards.against_layout(spec, turned)] == [
        "input 0 (A)", "input 1 (B)", f"input 3 (aux load {load})"]
    with pytest.raises(LaunchError, match="input 0 \\(A\\): stride along K is 64"):
        check(spec, turned)
    copies = guards.copy_into_rows(spec, turned)
    assert copies[2] is b
    for got, want, orig in zip(copies, (x, w, b, residual), turned):
        assert torch.equal(got, want) and got.stride(-1) == 1
        assert got is orig or (guards.TensorInfo.of(got).padded and got.data_ptr() != orig.data_ptr())
    p = check(spec, copies)
    assert (p.M, p.N, p.K) == (M, N, K)
    assert guards.copy_into_rows(spec, copies) is None  # the copies are read as they are
