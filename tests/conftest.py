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


@pytest.fixture(autouse=True)
def _statistics_on_cpu(request, monkeypatch):
    """The CPU and nvcc tiers cover the statistics reductions (EVT_STATISTICS=1, off by default
    because their kernels failed the GPU tier); GPU tests see the default unless they ask."""
    if "gpu" not in request.node.keywords and "EVT_STATISTICS" not in __import__("os").environ:
        monkeypatch.setenv("EVT_STATISTICS", "1")
    yield


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
