import shutil

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    has_sm90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
    has_nvcc = shutil.which("nvcc") is not None
    for item in items:
        if "gpu" in item.keywords and not has_sm90:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA SM90 (H100/H200) device"))
        if "nvcc" in item.keywords and not has_nvcc:
            item.add_marker(pytest.mark.skip(reason="nvcc not found on PATH (install the CUDA toolkit)"))


@pytest.fixture
def attention_as_written(monkeypatch):
    """Attention written out as matmuls and a softmax keeps evt's own kernels for it (the scores'
    epilogue, heads read in place; `EVT_SDPA=0`): for the modules that test those kernels
    (`pytestmark = pytest.mark.usefixtures("attention_as_written")`). By default it becomes one
    SDPA call (tests/test_attention_to_sdpa.py)."""
    monkeypatch.setenv("EVT_SDPA", "0")


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """A fresh Dynamo, and no Inductor FX graph or AOTAutograd cache: tests patch evt's passes
    and runtime, and a graph replayed from an earlier test would skip the patched code
    (tests/test_backend_cache.py turns them on to test them)."""
    with torch._inductor.config.patch(fx_graph_cache=False), torch._functorch.config.patch(
        enable_autograd_cache=False
    ):
        torch._dynamo.reset()
        yield
        torch._dynamo.reset()
