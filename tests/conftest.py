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
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
