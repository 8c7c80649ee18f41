# pytest fixtures of the Python package tests: the devices to run on (CPU, plus CUDA when the package was built with
# it and a device answers), a seeded generator per test, and the shipped model's folder.
import os

import pytest
import torch

import moex_experts

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIPPED_MODEL = os.path.join(REPO, "models", "moex-tiny-moe")


def cuda_ready():
    return moex_experts.with_cuda and torch.cuda.is_available() and moex_experts.why_not("grouped_mm", "cuda") is None


DEVICES = ["cpu"] + (["cuda"] if cuda_ready() else [])


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(1234)


@pytest.fixture
def shipped_model():
    return SHIPPED_MODEL
