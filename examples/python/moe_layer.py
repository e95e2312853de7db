#!/usr/bin/env python3
"""A complete Mixture-of-Experts layer forward in PyTorch with moe_routing, checked against plain PyTorch.

    router logits -> top-k experts and weights -> tokens grouped by expert (align) -> expert rows gathered
    (permute) -> one batched matmul per GEMM tile of block_size rows (each tile belongs to one expert) ->
    weighted sum of each token's k expert outputs (combine)

With the data-path and gating operations (issues 27/28) in the build, it uses route/topk_gating, permute and
combine; without them, torch.topk for gating, a gather for permute and moe_sum for the sum. Runs on the build's
backend: CPU tensors for the CPU build, CUDA tensors for the CUDA build.  python3 examples/python/moe_layer.py"""

import torch
import torch.nn.functional as F

import moe_routing
import moe_routing.torch as mt


class MoELayer(torch.nn.Module):
    def __init__(self, hidden, ffn, num_experts, topk, block_size=16, device="cpu"):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        init = lambda *s: (torch.randn(*s, generator=g) / s[-2] ** 0.5).to(device)  # noqa: E731
        self.router = init(hidden, num_experts)
        self.w_gate, self.w_up = init(num_experts, hidden, ffn), init(num_experts, hidden, ffn)
        self.w_down = init(num_experts, ffn, hidden)
        self.num_experts, self.topk, self.block_size = num_experts, topk, block_size

    def gate(self, x):
        logits = x @ self.router
        if moe_routing.available("topk_gating"):
            return mt.topk_gating(logits, self.topk, score="softmax", renormalize=True)
        w, ids = torch.topk(torch.softmax(logits, dim=-1), self.topk, dim=-1)
        return ids.to(torch.int32), w / w.sum(dim=-1, keepdim=True)

    def experts(self, rows, expert_ids):
        """rows [blocks * block_size, hidden] grouped by expert; block b belongs to expert_ids[b] (-1: unused)."""
        bs = self.block_size
        e = expert_ids.clamp(min=0).long()
        r = rows.view(-1, bs, rows.shape[-1])
        h = F.silu(torch.bmm(r, self.w_gate[e])) * torch.bmm(r, self.w_up[e])
        y = torch.bmm(h, self.w_down[e])
        return (y * (expert_ids >= 0).view(-1, 1, 1)).view(-1, y.shape[-1])

    def forward(self, x):
        T, H = x.shape
        K, bs = self.topk, self.block_size
        ids, weights = self.gate(x)
        if all(moe_routing.available(o) for o in ("align_block_size_ep", "permute", "combine")):
            s, e, p, _, pos = mt.align_block_size_ep(ids, self.num_experts, bs, with_positions=True)
            rows = mt.permute(x, s, p, K)  # rows past num_tokens_post_pad are not written; combine
            blocks = e.shape[0]            # never reads them (token_positions point below it)
            rows = F.pad(rows, (0, 0, 0, blocks * bs - rows.shape[0]))
            y = self.experts(rows, e)
            return mt.combine(y, weights, pos, layout="permuted")
        s, e, p = mt.align_block_size(ids, self.num_experts, bs)
        blocks = e.shape[0]
        s = F.pad(s, (0, blocks * bs - s.shape[0]), value=T * K)
        valid = s < T * K  # padding entries hold the sentinel T*K
        rows = x[(s // K).clamp(max=T - 1).long()] * valid.unsqueeze(1)
        y = self.experts(rows, e)
        flat = torch.zeros(T * K, H, dtype=x.dtype, device=x.device)
        flat[s[valid].long()] = y[valid]
        return mt.moe_sum((flat.view(T, K, H) * weights.unsqueeze(-1)).contiguous())

    def reference(self, x):
        """Plain PyTorch: softmax top-k, then each token through its k experts one at a time."""
        w, ids = torch.topk(torch.softmax(x @ self.router, dim=-1), self.topk, dim=-1)
        w = w / w.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(x)
        for t in range(x.shape[0]):
            for k in range(self.topk):
                ex = int(ids[t, k])
                h = F.silu(x[t] @ self.w_gate[ex]) * (x[t] @ self.w_up[ex])
                out[t] += w[t, k] * (h @ self.w_down[ex])
        return out


def main():
    device = "cpu" if moe_routing.backend_name() == "cpu" else "cuda"
    paths = "route/permute/combine" if moe_routing.available("permute") else "topk + align + gather + moe_sum"
    print(f"moe_routing backend {moe_routing.backend_name()} on {device}; data path: {paths}")
    for tokens, experts, topk in [(1, 8, 2), (33, 8, 2), (200, 64, 6)]:
        layer = MoELayer(hidden=64, ffn=96, num_experts=experts, topk=topk, device=device)
        x = torch.randn(tokens, 64, generator=torch.Generator().manual_seed(tokens)).to(device)
        with torch.no_grad():
            y, ref = layer(x), layer.reference(x)
        err = (y - ref).abs().max().item()
        ok = torch.allclose(y, ref, rtol=1e-4, atol=1e-4)
        print(f"tokens {tokens:4d} experts {experts:3d} topk {topk}: max |y - reference| = {err:.2e} "
              f"{'OK' if ok else 'MISMATCH'}")
        if not ok:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
