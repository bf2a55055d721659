"""hpckit's collective sweep over torch.distributed, printing nccl-tests' table (so one parser reads both).

Run one process per rank (srun: one task per node on CPUs, one per GPU with CUDA). Ranks rendezvous
through torch.distributed's env:// method: MASTER_ADDR and MASTER_PORT from the environment, and
RANK / WORLD_SIZE / LOCAL_RANK, or Slurm's SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID when those are
absent. NCCL when CUDA is there, gloo otherwise (`--backend` forces one).

For each message size it times `-n` iterations after `-w` warmup ones, out-of-place then in-place,
checks one more call of each against known values (`-c 1`), and prints a row as nccl-tests does:
size, count, type, redop, root, then time (us, mean over ranks), algbw and busbw (GB/s) and #wrong
per placement. Sizes, counts and bus bandwidth factors follow nccl-tests (doc/PERFORMANCE.md):
all_reduce 2(n-1)/n; all_gather, reduce_scatter, alltoall (n-1)/n; broadcast, reduce 1.
torch has no out-of-place all_reduce, broadcast or reduce: their out-of-place column copies the input
into the output buffer and runs the collective there, which is what the result being elsewhere costs.
Its all-to-all cannot work in place: the in-place column exchanges through a scratch buffer and
copies the result back.

Standalone on purpose (the standard library and torch only): it is copied to a shared filesystem and
run by whatever Python on the nodes has torch. Exit status: 0 ok, 3 some values were wrong, 1 error.
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

try:
    import torch
    import torch.distributed as dist
except ImportError as missing:  # an interpreter without torch: every rank fails here at once
    # srun --kill-on-bad-exit stops the step as soon as one rank exits, and a rank's last lines can be lost
    # with it (seen on the lab: the output ended inside a traceback). Each rank states the cause on one line,
    # flushed, and stays a moment, so that every rank's reason reaches the job's output before any exits.
    print(f"{type(missing).__name__}: {missing}", file=sys.stderr, flush=True)
    time.sleep(2)
    raise SystemExit(1) from None

# op -> (bus bandwidth factor of n ranks, redop column, whether it has a root)
BUSBW_FACTORS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}
REDOP = {"all_reduce": "sum", "reduce_scatter": "sum", "reduce": "sum"}
ROOTED = frozenset({"broadcast", "reduce"})
# ops whose sizes are totals over the ranks: the per-rank count is size / (element size * ranks)
PER_RANK = frozenset({"all_gather", "reduce_scatter", "alltoall"})
DTYPES = {"float": torch.float32, "double": torch.float64, "half": torch.float16, "bfloat16": torch.bfloat16}
# what a run's result depends on besides the code: printed so the verdict can say what was in force
ENV_KEYS = (
    "NCCL_ALGO",
    "NCCL_PROTO",
    "NCCL_NVLS_ENABLE",
    "NCCL_COLLNET_ENABLE",
    "NCCL_IB_HCA",
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "OMP_NUM_THREADS",
)
EXIT_WRONG = 3


def parse_size(text: str) -> int:
    """nccl-tests sizes: bytes, or with a K, M or G suffix (powers of 1024)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    scale = units.get(text[-1:], 1)
    number = text[:-1] if text[-1:] in units else text
    if not number.isdigit():
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (bytes, or N with K, M or G)")
    return int(number) * scale


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-o", "--op", choices=sorted(BUSBW_FACTORS), default="all_reduce")
    parser.add_argument("-b", "--minbytes", type=parse_size, default=parse_size("1K"))
    parser.add_argument("-e", "--maxbytes", type=parse_size, default=parse_size("16M"))
    parser.add_argument("-f", "--stepfactor", type=int, default=2)
    parser.add_argument("-w", "--warmup_iters", type=int, default=5)
    parser.add_argument("-n", "--iters", type=int, default=20)
    parser.add_argument("-c", "--check", type=int, default=1, help="1: check results; 0: do not")
    parser.add_argument("-d", "--datatype", choices=sorted(DTYPES), default="float")
    parser.add_argument("--backend", choices=["auto", "nccl", "gloo"], default="auto")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a collective may hang before failing")
    args = parser.parse_args(argv)
    if args.stepfactor < 2 or args.iters < 1 or args.warmup_iters < 0 or not 0 < args.minbytes <= args.maxbytes:
        parser.error("need -f >= 2, -n >= 1, -w >= 0 and 0 < -b <= -e")
    return args


@dataclass(frozen=True)
class World:
    rank: int
    size: int
    local_rank: int
    device: torch.device
    backend: str

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"


def _env(name: str, slurm: str) -> int:
    value = os.environ.get(name) or os.environ.get(slurm)
    if value is None:
        raise SystemExit(f"torch_sweep: set {name} (or run under srun, which sets {slurm})")
    os.environ[name] = value  # env:// reads RANK and WORLD_SIZE itself
    return int(value)


def join(backend: str, timeout: float) -> World:
    """Rendezvous with the other ranks (env://) and pick this rank's device."""
    for key in ("MASTER_ADDR", "MASTER_PORT"):
        if not os.environ.get(key):
            raise SystemExit(f"torch_sweep: set {key} (the first node and a free port)")
    rank = _env("RANK", "SLURM_PROCID")
    size = _env("WORLD_SIZE", "SLURM_NTASKS")
    local = _env("LOCAL_RANK", "SLURM_LOCALID")
    use_nccl = backend == "nccl" or (backend == "auto" and torch.cuda.is_available())
    device = torch.device("cuda", local % max(torch.cuda.device_count(), 1)) if use_nccl else torch.device("cpu")
    if use_nccl:
        torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl" if use_nccl else "gloo",
        init_method="env://",
        timeout=datetime.timedelta(seconds=timeout),
        device_id=device if use_nccl else None,
    )
    return World(rank, size, local, device, "nccl" if use_nccl else "gloo")


def sizes(minbytes: int, maxbytes: int, factor: int) -> list[int]:
    out, size = [], minbytes
    while size <= maxbytes:
        out.append(size)
        size *= factor
    return out


def counts(op: str, size: int, elsize: int, ranks: int) -> tuple[int, int]:
    """(count printed, size printed) for a requested size, as nccl-tests rounds them."""
    if op in PER_RANK:
        count = size // (elsize * ranks)
        return count, count * elsize * ranks
    count = size // elsize
    return count, count * elsize


# ---------------------------------------------------------------- the collectives


def _all_gather(out: torch.Tensor, inp: torch.Tensor) -> None:
    # all_gather_single is the name from torch 2.13 on; all_gather_into_tensor before
    getattr(dist, "all_gather_single", dist.all_gather_into_tensor)(out, inp)


def _reduce_scatter(out: torch.Tensor, inp: torch.Tensor) -> None:
    getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)(out, inp)


def _all_reduce(t: torch.Tensor) -> None:
    dist.all_reduce(t)


def _broadcast(t: torch.Tensor) -> None:
    dist.broadcast(t, src=0)


def _reduce(t: torch.Tensor) -> None:
    dist.reduce(t, dst=0)


_ROOTED_OR_REDUCE: dict[str, Callable[[torch.Tensor], None]] = {
    "all_reduce": _all_reduce,
    "broadcast": _broadcast,
    "reduce": _reduce,
}


@dataclass
class Buffers:
    """The send and receive buffers of one placement, and the call that runs the collective on them."""

    send: torch.Tensor
    recv: torch.Tensor
    call: Callable[[], None]


def _alltoall(total: int, world: World, dtype: torch.dtype, in_place: bool) -> Buffers:
    send = torch.empty(total, dtype=dtype, device=world.device)
    scratch = torch.empty(total, dtype=dtype, device=world.device)
    if not in_place:
        return Buffers(send, scratch, lambda: dist.all_to_all_single(scratch, send))

    # torch's all_to_all_single gives wrong results when both buffers are one: an in-place
    # all-to-all needs a scratch buffer anyway, so exchange through one and copy back
    def through_scratch() -> None:
        dist.all_to_all_single(scratch, send)
        send.copy_(scratch)

    return Buffers(send, send, through_scratch)


def buffers(op: str, count: int, world: World, dtype: torch.dtype, in_place: bool) -> Buffers:
    n, r = world.size, world.rank
    total = count * n if op in PER_RANK else count
    if op == "all_gather":
        recv = torch.empty(total, dtype=dtype, device=world.device)
        send = recv[r * count : (r + 1) * count] if in_place else torch.empty(count, dtype=dtype, device=world.device)
        return Buffers(send, recv, lambda: _all_gather(recv, send))
    if op == "reduce_scatter":
        send = torch.empty(total, dtype=dtype, device=world.device)
        recv = send[r * count : (r + 1) * count] if in_place else torch.empty(count, dtype=dtype, device=world.device)
        return Buffers(send, recv, lambda: _reduce_scatter(recv, send))
    if op == "alltoall":
        return _alltoall(total, world, dtype, in_place)
    single = _ROOTED_OR_REDUCE[op]
    send = torch.empty(total, dtype=dtype, device=world.device)
    if in_place:
        return Buffers(send, send, lambda: single(send))
    recv = torch.empty(total, dtype=dtype, device=world.device)

    def copy_then_run() -> None:
        recv.copy_(send)
        single(recv)

    return Buffers(send, recv, copy_then_run)


# ---------------------------------------------------------------- values to check


def pattern(length: int, rank: int, offset: int = 0) -> torch.Tensor:
    """Rank `rank`'s input: small whole numbers, exact in every dtype and in sums over many ranks."""
    return (torch.arange(offset, offset + length, dtype=torch.int64) % 7 + rank + 1).to(torch.float64)


def expected(op: str, count: int, world: World) -> torch.Tensor:
    """What this rank's receive buffer holds afterwards (float64, on the CPU)."""
    n, r = world.size, world.rank
    if op == "all_reduce":
        return sum((pattern(count, k) for k in range(n)), torch.zeros(count, dtype=torch.float64))
    if op == "all_gather":
        return torch.cat([pattern(count, k) for k in range(n)])
    if op == "reduce_scatter":
        return sum((pattern(count, k, r * count) for k in range(n)), torch.zeros(count, dtype=torch.float64))
    if op == "alltoall":
        # chunk k of rank r's output is chunk r of rank k's input
        return torch.cat([pattern(n * count, k)[r * count : (r + 1) * count] for k in range(n)])
    if op == "broadcast":
        return pattern(count, 0)
    if r == 0:  # reduce: only the root's result is defined
        return sum((pattern(count, k) for k in range(n)), torch.zeros(count, dtype=torch.float64))
    return torch.empty(0, dtype=torch.float64)


def fill(bufs: Buffers, world: World, dtype: torch.dtype) -> None:
    values = pattern(bufs.send.numel(), world.rank)
    bufs.send.copy_(values.to(dtype))


def wrong_values(op: str, bufs: Buffers, count: int, world: World, dtype: torch.dtype) -> int:
    """Run once on known inputs; the number of result elements that differ from what they must be."""
    fill(bufs, world, dtype)
    bufs.call()
    want = expected(op, count, world)
    if want.numel() == 0:
        return 0
    got = bufs.recv.to(torch.float64).cpu()
    return int((got != want).sum().item())


# ---------------------------------------------------------------- timing and printing


def synchronize(world: World) -> None:
    if world.cuda:
        torch.cuda.synchronize(world.device)


def time_us(bufs: Buffers, world: World, warmup: int, iters: int) -> float:
    """Mean time of one call over `iters` calls, averaged over the ranks (as nccl-tests does)."""
    for _ in range(warmup):
        bufs.call()
    synchronize(world)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        bufs.call()
    synchronize(world)
    elapsed = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64, device=world.device)
    dist.all_reduce(elapsed)
    return float(elapsed.item()) / world.size * 1e6


def total_over_ranks(value: int, world: World) -> int:
    tensor = torch.tensor([value], dtype=torch.int64, device=world.device)
    dist.all_reduce(tensor)
    return int(tensor.item())


@dataclass
class Measure:
    time_us: float
    algbw: float
    busbw: float
    wrong: int | None


def measure(op: str, args: argparse.Namespace, count: int, size: int, world: World, in_place: bool) -> Measure:
    dtype = DTYPES[args.datatype]
    bufs = buffers(op, count, world, dtype, in_place)
    fill(bufs, world, dtype)
    elapsed = time_us(bufs, world, args.warmup_iters, args.iters)
    wrong = total_over_ranks(wrong_values(op, bufs, count, world, dtype), world) if args.check else None
    algbw = size / (elapsed * 1e-6) / 1e9
    return Measure(elapsed, algbw, algbw * BUSBW_FACTORS[op](world.size), wrong)


def _time(t: float) -> str:
    return f"{t:8.2f}" if t < 1e6 else f"{t:8.1f}"


def _cells(m: Measure) -> str:
    wrong = "N/A" if m.wrong is None else str(m.wrong)
    return f" {_time(m.time_us)} {m.algbw:7.3f} {m.busbw:7.3f} {wrong:>6}"


def row(op: str, size: int, count: int, dtype: str, out: Measure, inp: Measure) -> str:
    redop = REDOP.get(op, "none")
    root = 0 if op in ROOTED else -1
    return f"{size:12d} {count:13d} {dtype:>9} {redop:>7} {root:7d}{_cells(out)}{_cells(inp)}"


def _header_line(keys: tuple[str, ...], group: tuple[str, ...]) -> str:
    """One header line, its columns as wide as the rows' (the first character becomes '#')."""
    key_cells = f"{keys[0]:>12} {keys[1]:>13} {keys[2]:>9} {keys[3]:>7} {keys[4]:>7}"
    cells = " ".join(f"{c:>{w}}" for c, w in zip(group, (8, 7, 7, 6), strict=True))
    return ("#" + key_cells[1:] + f" {cells} {cells}").rstrip()


HEADER = "\n".join(
    [
        "#",
        "#" + " " * 61 + "out-of-place" + " " * 20 + "in-place",
        _header_line(("size", "count", "type", "redop", "root"), ("time", "algbw", "busbw", "#wrong")),
        _header_line(("(B)", "(elements)", "", "", ""), ("(us)", "(GB/s)", "(GB/s)", "")),
    ]
)


def device_name(world: World) -> tuple[str, str]:
    """(bus id, name) of this rank's device, as nccl-tests' `# Rank` lines show them."""
    if not world.cuda:
        return "cpu", "CPU (gloo)"
    props = torch.cuda.get_device_properties(world.device)
    bus = f"{getattr(props, 'pci_domain_id', 0):04x}:{getattr(props, 'pci_bus_id', 0):02x}:"
    bus += f"{getattr(props, 'pci_device_id', 0):02x}"
    return bus, str(props.name)


def _rank_info(info: object) -> tuple[str, int, int, str, str]:
    if not isinstance(info, tuple) or len(info) != 5:
        raise RuntimeError(f"a rank sent {info!r} instead of its host and device")
    host, pid, local, bus, name = info
    return str(host), int(pid), int(local), str(bus), str(name)


def preamble(op: str, args: argparse.Namespace, world: World) -> list[str]:
    """The header lines rank 0 prints: hpckit's own `# hpckit:` lines, then nccl-tests' header."""
    here = (socket.gethostname(), os.getpid(), world.local_rank, *device_name(world))
    everyone: list[object] = [None] * world.size
    dist.all_gather_object(everyone, here)
    lines = [
        f"# hpckit: torch_sweep {op} (as nccl-tests {op}_perf) over torch.distributed {world.backend}",
        f"# hpckit: torch {torch.__version__}, {world.size} ranks",
        f"# hpckit: python {sys.executable}",  # which toolchain ran: the deployed virtualenv, or another
    ]
    if world.backend == "nccl":
        version = torch.cuda.nccl.version()  # type: ignore[no-untyped-call]
        lines.append("# hpckit: NCCL version " + ".".join(map(str, version)))
    lines += [f"# hpckit: env {key}={os.environ.get(key, '')}" for key in ENV_KEYS]
    lines.append(
        f"# nThread 1 nGpus 1 minBytes {args.minbytes} maxBytes {args.maxbytes} step: {args.stepfactor}(factor)"
        f" warmup iters: {args.warmup_iters} iters: {args.iters} agg iters: 1 validation: {args.check} graph: 0"
    )
    lines += ["#", "# Using devices"]
    for rank, info in enumerate(everyone):
        host, pid, local, bus, name = _rank_info(info)
        lines.append(f"#  Rank {rank:2d} Group  0 Pid {pid:6d} on {host:>10} device {local:2d} [{bus}] {name}")
    return lines


@dataclass(frozen=True)
class Printer:
    """Rank 0 prints the table, a line at a time as it goes (the job's output file shows progress)."""

    enabled: bool

    def __call__(self, text: str) -> None:
        if self.enabled:
            print(text, flush=True)


def sweep(args: argparse.Namespace, world: World) -> int:
    """Print the table (rank 0) and return the number of wrong values over all sizes."""
    op = args.op
    out = Printer(world.rank == 0)
    for line in preamble(op, args, world):
        out(line)
    out(HEADER)
    elsize = torch.empty(0, dtype=DTYPES[args.datatype]).element_size()
    busbw_sum, rows, wrong, seen = 0.0, 0, 0, set()
    for requested in sizes(args.minbytes, args.maxbytes, args.stepfactor):
        count, size = counts(op, requested, elsize, world.size)
        if count == 0 or size in seen:
            continue  # smaller than one element per rank, or the same as the row before
        seen.add(size)
        results = [measure(op, args, count, size, world, in_place) for in_place in (False, True)]
        out(row(op, size, count, args.datatype, *results))
        busbw_sum += results[0].busbw + results[1].busbw
        rows += 2
        wrong += sum(m.wrong or 0 for m in results)
    out(f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}")
    out(f"# Avg bus bandwidth    : {busbw_sum / max(rows, 1):.6g} ")
    out("#")
    return wrong


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    world = join(args.backend, args.timeout)
    try:
        wrong = sweep(args, world)
    except Exception as exc:  # every rank says where it failed; the launcher names the node too
        where = f"rank {world.rank} on {socket.gethostname()}"
        print(f"# hpckit: error: {where}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        dist.destroy_process_group()
    return EXIT_WRONG if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
