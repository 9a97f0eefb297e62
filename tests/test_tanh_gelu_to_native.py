"""`tanh_gelu_to_native`: the tanh GELU written out in ops becomes one
`F.gelu(approximate="tanh")` on Dynamo's graph, in bf16 and fp16 only, and only where the
ops compute that function."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import evt
from evt.graph.tanh_gelu_to_native import tanh_gelu_to_native
from tests.graphs import rel_err
from tests.test_recompute_inside import GeluNewStack

K0 = math.sqrt(2.0 / math.pi)


def gelu_new(x):  # Hugging Face's NewGELUActivation (GPT-2)
    return 0.5 * x * (1.0 + torch.tanh(K0 * (x + 0.044715 * torch.pow(x, 3.0))))


def gelu_fast(x):  # Hugging Face's FastGELUActivation
    return 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)))


def gelu_methods(x):  # method calls, the factors in another order
    return x * (x.pow(3) * 0.044715 + x).mul(K0).tanh().add(1.0) * 0.5


def rewritten(fn, *args, dynamic: bool | None = None) -> tuple[int, object]:
    """How many GELUs the pass rewrote in `fn`'s Dynamo graph, and the rewritten graph's result."""
    counts = []

    def backend(gm, example_inputs):
        counts.append(tanh_gelu_to_native(gm))
        return gm

    torch._dynamo.reset()
    out = torch.compile(fn, backend=backend, dynamic=dynamic)(*args)
    return sum(counts), out


@pytest.mark.parametrize("fn", [gelu_new, gelu_fast, gelu_methods])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_each_written_form_becomes_the_native_gelu(fn, dtype):
    x = torch.randn(64, 48, dtype=dtype) * 3
    done, out = rewritten(fn, x)
    assert done == 1
    torch.testing.assert_close(out, F.gelu(x, approximate="tanh"), rtol=0, atol=0)
    exact = fn(x.double())
    # at least as close to the exact function as the written-out ops in the same dtype
    assert rel_err(out, exact) <= rel_err(fn(x), exact)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: 0.4 * x * (1.0 + torch.tanh(K0 * (x + 0.044715 * x**3))),  # another factor
        lambda x: 0.5 * x * (1.0 + torch.tanh(K0 * (x + 0.04 * x**3))),  # another cubic term
        lambda x: 0.5 * x * (1.0 + torch.tanh(K0 * (x + 0.044715 * x**2))),  # x² for x³
        lambda x: 0.5 * x * (1.0 + torch.tanh(K0 * (x + 0.044715 * x**3) + 0.1)),  # a constant
        lambda x: 0.5 * x * (2.0 + torch.tanh(K0 * (x + 0.044715 * x**3))),  # 2 + tanh
        lambda x: 0.5 * x * (1.0 + torch.sigmoid(K0 * (x + 0.044715 * x**3))),  # not tanh
        lambda x: 0.5 * x.flip(0) * (1.0 + torch.tanh(K0 * (x + 0.044715 * x**3))),  # another x
    ],
    ids=["factor", "k1", "square", "shifted", "two_plus", "sigmoid", "other_x"],
)
def test_other_functions_stay_written_out(fn):
    x = torch.randn(64, 48, dtype=torch.bfloat16)
    done, out = rewritten(fn, x)
    assert done == 0
    torch.testing.assert_close(out, fn(x), rtol=0, atol=0)


def test_float32_and_mixed_dtypes_stay_written_out():
    """tanh.approx's error is below a 16-bit result's rounding alone: a float32 chain, or one
    that casts inside, keeps its ops (libm's tanhf, as eager)."""
    x = torch.randn(64, 48)
    assert rewritten(gelu_new, x)[0] == 0
    mixed = lambda x: 0.5 * x * (1.0 + torch.tanh(K0 * (x + 0.044715 * x.float() ** 3)).to(x.dtype))  # noqa: E731
    assert rewritten(mixed, x.bfloat16())[0] == 0


def test_a_step_used_elsewhere_keeps_its_value():
    """The tanh is also returned: the GELU is native, the tanh still computed for that use."""

    def fn(x):
        t = torch.tanh(K0 * (x + 0.044715 * x**3))
        return 0.5 * x * (1.0 + t), t

    x = torch.randn(64, 48, dtype=torch.bfloat16)
    done, (y, t) = rewritten(fn, x)
    assert done == 1
    torch.testing.assert_close(y, F.gelu(x, approximate="tanh"), rtol=0, atol=0)
    torch.testing.assert_close(t, fn(x)[1], rtol=0, atol=0)


def gelu_traced_pi(x):  # as Hugging Face writes it: math.pi read where it runs
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def test_under_dynamic_shapes_a_traced_pi_is_taken_at_its_value():
    """Under `dynamic=True` Dynamo passes math.pi as an input and computes √(2/π) in the graph
    (`_sym_sqrt(2 / pi.item())`): the pass takes its traced value, and the graph is still the
    native GELU at another batch size."""
    for rows in (64, 40):
        x = torch.randn(rows, 48, dtype=torch.bfloat16) * 3
        done, out = rewritten(gelu_traced_pi, x, dynamic=True)
        assert done == 1
        torch.testing.assert_close(out, F.gelu(x, approximate="tanh"), rtol=0, atol=0)


def test_off_with_the_environment(monkeypatch):
    monkeypatch.setenv("EVT_TANH_GELU", "0")
    assert rewritten(gelu_new, torch.randn(8, 8, dtype=torch.bfloat16))[0] == 0


def test_a_bf16_stack_fuses_the_native_gelu_and_trains_as_eager():
    """GPT-2-style blocks in bf16 through evt (the regions' reference path on the CPU): the up
    projection's epilogue computes gelu_tanh and stores x, the down projection's dgrad
    computes gelu_tanh_backward from it, and the gradients are as close to the fp64 step as
    bf16 eager's written-out ops are (twice their error, at most)."""
    torch.manual_seed(0)
    model, x = GeluNewStack(), torch.randn(512, 128)

    def grads(dtype, backend=None):
        torch._dynamo.reset()
        m = GeluNewStack().to(dtype)
        m.load_state_dict(model.state_dict())
        fn = m if backend is None else torch.compile(m, backend=backend, options={"rest": "eager"})
        fn(x.to(dtype)).backward()
        return {n: p.grad.double() for n, p in m.named_parameters()}

    want, eager, got = grads(torch.float64), grads(torch.bfloat16), grads(torch.bfloat16, evt.backend.evt_backend)
    for n in want:
        assert rel_err(got[n], want[n]) <= 2 * rel_err(eager[n], want[n]) + 1e-3, n
    report = evt.explain(lambda x: model.bfloat16()(x).backward(), x.bfloat16())
    ops = {n.op for r in report.regions for n in r.spec.nodes if n.kind == "compute"}
    assert {"gelu_tanh", "gelu_tanh_backward"} <= ops and not ops & {"tanh", "cube"}, ops
