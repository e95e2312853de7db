#!/usr/bin/env python3
"""torch.distributed.all_to_all_single (NCCL) on the bytes ep_bench_nccl moved, so that the library's dispatch +
combine and PyTorch's all-to-all are compared on the same bytes per pair of ranks, in the same session.

The byte counts are EP_BYTES's matrices (sender x receiver, rank-major, comma-separated: one number for one rank):
    python3 perf/ep_torch_baseline.py --dispatch-bytes D --combine-bytes C [--iters 20] [--warmup 3]
    torchrun --nproc-per-node N perf/ep_torch_baseline.py ...     (N ranks: matrices of N*N)
Without torchrun's environment it is a world of one on 127.0.0.1:29531. Prints, on rank 0:
    torch all_to_all_single x2 of the same bytes: X ms, Y GB/s aggregate
Not run by CI (no GPU there).
"""
import argparse
import os

# never NVLink multicast (the device machines' rule); before torch initialises NCCL
os.environ["NCCL_NVLS_ENABLE"] = "0"
for key, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29531"), ("RANK", "0"), ("WORLD_SIZE", "1")):
    os.environ.setdefault(key, value)

import torch  # noqa: E402  (after the environment above)
import torch.distributed as dist  # noqa: E402


def matrix(text, world):
    values = [int(v) for v in text.split(",") if v]
    if len(values) != world * world:
        raise SystemExit(f"{len(values)} byte counts for {world} ranks: want {world * world} (sender x receiver)")
    return [values[r * world:(r + 1) * world] for r in range(world)]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dispatch-bytes", required=True, help="EP_BYTES dispatch=: sender x receiver bytes")
    parser.add_argument("--combine-bytes", required=True, help="EP_BYTES combine=: sender x receiver bytes")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl")
    exchanges = []
    for text in (args.dispatch_bytes, args.combine_bytes):
        m = matrix(text, world)
        send = [m[rank][d] for d in range(world)]
        recv = [m[s][rank] for s in range(world)]
        exchanges.append((torch.empty(sum(send), dtype=torch.uint8, device="cuda"),
                          torch.empty(sum(recv), dtype=torch.uint8, device="cuda"), send, recv))

    def once():
        for send_buf, recv_buf, send, recv in exchanges:
            dist.all_to_all_single(recv_buf, send_buf, output_split_sizes=recv, input_split_sizes=send)

    for _ in range(args.warmup):
        once()
    torch.cuda.synchronize()
    dist.barrier()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(args.iters):
        once()
    end.record()
    end.synchronize()
    ms = torch.tensor([start.elapsed_time(end) / args.iters], device="cuda")
    dist.all_reduce(ms, op=dist.ReduceOp.MAX)  # like ep_bench: the slowest rank's time
    total = sum(sum(row) for text in (args.dispatch_bytes, args.combine_bytes) for row in matrix(text, world))
    if rank == 0:
        print(f"torch all_to_all_single x2 of the same bytes: {ms.item():.3f} ms, "
              f"{total / (ms.item() * 1e-3) / 1e9:.2f} GB/s aggregate ({world} ranks, {total / 1e6:.3f} MB per layer)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
