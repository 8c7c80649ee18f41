# torch.compile sees each moex experts call as one node (the moex::experts custom op with its fake implementation):
# fullgraph=True compiles, dynamo reports no graph break, and the compiled result equals the eager one; on CUDA the
# same under CUDA graphs (mode="reduce-overhead"), replayed with routing that changes between calls.
import pytest
import torch

import moex_experts
from test_bindings import make_problem

from conftest import cuda_ready


class MoeBlock(torch.nn.Module):
    """A router and the experts, as a transformers MoE block calls them."""

    def __init__(self, up, down, k, backend):
        super().__init__()
        self.router = torch.nn.Linear(up.shape[-1], up.shape[0], bias=False, dtype=up.dtype, device=up.device)
        self.up, self.down, self.k, self.backend = up, down, k, backend

    def forward(self, x):
        w, ids = torch.topk(torch.softmax(self.router(x).float(), dim=-1), self.k)
        return moex_experts.experts(x, ids, w, self.up, self.down, backend=self.backend) + x


@pytest.mark.parametrize("backend", ["grouped_mm", "batched_mm", "auto"])
def test_fullgraph_one_node_no_graph_break(backend, device, gen):
    (x, _, _, up, down, _, _), _ = make_problem(16, 64, 32, 8, 2, torch.float32, device, gen)
    block = MoeBlock(up, down, 2, backend)
    with torch.no_grad():
        explanation = torch._dynamo.explain(block)(x)
        assert explanation.graph_break_count == 0 and explanation.graph_count == 1, explanation
        eager = block(x)
        compiled = torch.compile(block, fullgraph=True)
        torch.testing.assert_close(compiled(x), eager, rtol=1e-5, atol=1e-5)
        x2 = torch.randn(40, 64, generator=gen).to(device)  # another T: a dynamic size, still one node
        torch.testing.assert_close(compiled(x2), block(x2), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not cuda_ready(), reason="needs a CUDA device and a CUDA build of moex")
@pytest.mark.parametrize("backend", ["grouped_mm", "batched_mm", "auto"])
def test_cuda_graphs_reduce_overhead(backend, gen):
    (x, _, _, up, down, _, _), _ = make_problem(8, 256, 128, 16, 4, torch.bfloat16, "cuda", gen)
    block = MoeBlock(up, down, 4, backend)
    compiled = torch.compile(block, mode="reduce-overhead", fullgraph=True)
    with torch.no_grad():
        for step in range(4):  # warm-up runs, capture, then replays; the router gives new routing every step
            x = torch.randn(8, 256, generator=gen).to(torch.bfloat16).cuda()
            torch.testing.assert_close(compiled(x), block(x), rtol=2e-2, atol=2e-2)
