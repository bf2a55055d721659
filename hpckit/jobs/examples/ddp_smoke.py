"""A few steps of a tiny model under DistributedDataParallel: proves a torchrun job really is distributed.

Run by torchrun (the `torchrun` template's `script`): every rank checks an all_reduce of known values,
trains a 2-layer model for a few steps on data that differs per rank, and checks that all ranks end
with identical weights (DDP averaged their gradients). CPU and gloo unless CUDA is there. Standalone:
it needs only torch, so any node's Python with torch can run it from a shared filesystem.
Exit status 0 and a final `DDP SMOKE OK` line on rank 0 mean it worked.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=5, help="training steps")
    parser.add_argument("--width", type=int, default=16, help="hidden layer width")
    return parser.parse_args(argv)


def check_all_reduce(rank: int, world: int, device: torch.device) -> None:
    """Sum of (rank + 1) over all ranks must be world * (world + 1) / 2 on every rank."""
    value = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    expected = world * (world + 1) / 2
    if value.item() != expected:
        raise SystemExit(f"rank {rank}: all_reduce gave {value.item()}, expected {expected}")


def train(rank: int, steps: int, width: int, device: torch.device) -> tuple[float, torch.Tensor]:
    torch.manual_seed(0)  # the same initial weights everywhere (DDP also broadcasts rank 0's)
    model = nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 1)).to(device)
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(1000 + rank)  # each rank its own batch
    loss = torch.tensor(0.0)
    for _ in range(steps):
        x = torch.randn(32, 8, generator=data).to(device)
        y = x.sum(dim=1, keepdim=True)
        loss = nn.functional.mse_loss(ddp(x), y)
        optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        optimizer.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    return loss.item(), flat


def check_weights_agree(rank: int, world: int, flat: torch.Tensor) -> None:
    """Every rank's weights equal rank 0's: the gradients really were averaged across ranks."""
    reference = flat.clone()
    dist.broadcast(reference, src=0)
    diff = (flat - reference).abs().max()
    dist.all_reduce(diff, op=dist.ReduceOp.MAX)
    if diff.item() > 1e-6:
        raise SystemExit(f"rank {rank}: weights differ from rank 0 by {diff.item()} across {world} ranks")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    use_cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        check_all_reduce(rank, world, device)
        loss, flat = train(rank, args.steps, args.width, device)
        check_weights_agree(rank, world, flat)
        hosts: list[object] = [None] * world
        dist.all_gather_object(hosts, socket.gethostname())
    finally:
        dist.destroy_process_group()
    print(f"rank {rank}/{world} on {socket.gethostname()}: loss {loss:.4f}", flush=True)
    if rank == 0:
        print(f"DDP SMOKE OK world={world} hosts={','.join(sorted(set(map(str, hosts))))}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
