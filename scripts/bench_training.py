"""Whole training steps: torch DistributedDataParallel over gloo against hvlite.torch's
DistributedOptimizer, as a PyTorch user would run each of them, in the same processes.

    .venv/bin/mpiexec -n 2 .venv/bin/python scripts/bench_training.py --check
    .venv/bin/mpiexec -n 2 .venv/bin/python scripts/bench_training.py --rounds 7 --steps 10 \
        --out docs/bench_training_np2.csv --plot docs/bench_training_np2.png
    (the same with -n 4: 4 ranks; --models gpt or --modes ddp,hvlite for a part; --cpu adds the
    CPU time per step of the training thread and of the others, and how busy the cores were)

What a PyTorch user weighs is a whole step against what they run today, not one collective.
Models (written here, so torchvision stays optional), SGD with momentum, synthetic data from a
seed, the same batch per rank in every mode:
  mlp       30 Linear(256, 256) layers with ReLU (60 tensors), batch 64
  resnet18  torchvision's ResNet-18 layout (BasicBlock [2, 2, 2, 2], 64..512 channels, BatchNorm)
            on 3x32x32 images, 10 classes, batch 32
  gpt       4 pre-LN blocks, d_model 256, 4 heads, causal attention, seq 64, vocab 1000, batch 16
Modes (each rank at torch.set_num_threads(1)):
  1 process    rank 0 trains alone, plain optimizer; the other ranks wait in a gloo barrier
  DDP gloo     DistributedDataParallel with its defaults, init_process_group("gloo")
  hvlite       hvd.DistributedOptimizer(opt, named_parameters=...) + hvd.broadcast_parameters,
               as docs/horovod.md recommends
  hvlite fp16  the same with compression=hvd.Compression.fp16
  no communication (--modes ...,apart; not by default) every rank trains its own copy at once,
               plain optimizer: the step no data-parallel framework can beat on these cores
               (with more ranks than cores, "1 process" x N is not that bound)
After warm-up steps, each round runs --steps steps of every mode, the order of the modes rotated
from round to round so that drift on the machine hits them alike; a mode's step time in a round
is the slowest rank's. samples/s = global batch / step time, the median over rounds; efficiency
= samples/s on N ranks / (N x samples/s of 1 process); hvlite / DDP and fp16 / DDP are the
ratios of those medians.

--check trains DDP and hvlite for 20 SGD steps from one seed (different data on every rank) and
compares their parameters bit for bit, on each rank and across ranks; exit status 1 if they
differ. A model trained without communication must differ from both (else the check could not
fail). Bitwise equality with DDP is required at 2 ranks; at other sizes the two add the ranks'
gradients in different orders, and only agreement to rounding is required (see check()).

Gloo's rendezvous: MASTER_ADDR and MASTER_PORT from the environment when set; otherwise
127.0.0.1 when every rank is on one host (rank 0's host name resolved elsewhere), and a free port
rank 0 picks and broadcasts through hvlite.
"""
import argparse
import copy
import csv
import hashlib
import math
import os
import socket
import statistics
import sys
import threading
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import hvlite  # noqa: E402
import hvlite.torch as hvd  # noqa: E402

MODES = {"one": "1 process", "ddp": "DDP gloo", "hvlite": "hvlite", "fp16": "hvlite fp16",
         "apart": "no communication"}


# ---- models -----------------------------------------------------------------------------------

class MLP(nn.Module):
    def __init__(self, width=256, layers=30):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = F.relu(x)
        return x


class BasicBlock(nn.Module):
    """torchvision's BasicBlock: two 3x3 convolutions, BatchNorm, identity or 1x1 shortcut."""
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    """torchvision.models.resnet18(num_classes=...): the same modules, names and initialisation."""

    def __init__(self, num_classes=10, layers=(2, 2, 2, 2)):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._layer(64, layers[0])
        self.layer2 = self._layer(128, layers[1], 2)
        self.layer3 = self._layer(256, layers[2], 2)
        self.layer4 = self._layer(512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _layer(self, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes, 1, stride, bias=False),
                                       nn.BatchNorm2d(planes))
        mods = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes
        mods += [BasicBlock(planes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*mods)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class Block(nn.Module):
    """A pre-LN transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab=1000, seq=64, d=256, heads=4, layers=4):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def _batch_mlp(g, batch):
    return torch.randn(batch, 256, generator=g), torch.randint(0, 256, (batch,), generator=g)


def _batch_resnet(g, batch):
    return torch.randn(batch, 3, 32, 32, generator=g), torch.randint(0, 10, (batch,), generator=g)


def _batch_gpt(g, batch):
    tokens = torch.randint(0, 1000, (batch, 65), generator=g)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def _loss_ce(out, y):
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


# name -> (label for the table, constructor, per-rank batch, batch maker, lr)
MODELS = {
    "mlp": ("MLP, 30 Linear(256) (60 tensors), batch 64", MLP, 64, _batch_mlp, 0.01),
    "resnet18": ("ResNet-18 (torchvision's layout), 3x32x32, batch 32", ResNet18, 32,
                 _batch_resnet, 0.01),
    "gpt": ("GPT, 4 layers, d 256, 4 heads, seq 64, batch 16", GPT, 16, _batch_gpt, 0.01),
}


# ---- set-up -----------------------------------------------------------------------------------

def init_gloo():
    """One gloo process group beside hvlite, in the same processes, with hvlite's rank and size."""
    rank, size = hvd.rank(), hvd.size()
    addr = os.environ.get("MASTER_ADDR")
    if not addr:
        host0 = hvd.broadcast_object(socket.gethostname(), 0, name="bench.host")
        addr = "127.0.0.1" if hvd.local_size() == size else socket.gethostbyname(host0)
    port = os.environ.get("MASTER_PORT")
    if not port:
        port = None
        if rank == 0:
            with socket.socket() as s:
                s.bind(("", 0))
                port = s.getsockname()[1]
        port = hvd.broadcast_object(port, 0, name="bench.port")
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = addr, str(port)
    dist.init_process_group("gloo", rank=rank, world_size=size)


def build(name, seed):
    """The model from `seed` (the same on every rank) and this rank's fixed synthetic batch."""
    _, ctor, batch, make, lr = MODELS[name]
    torch.manual_seed(seed)
    model = ctor()
    g = torch.Generator().manual_seed(seed * 1000 + 1 + hvd.rank())
    return model, make(g, batch), lr


def fresh_copy(model):
    """A model with `model`'s parameters and buffers, its own storage."""
    return copy.deepcopy(model)


def sgd(params, lr):
    return torch.optim.SGD(params, lr=lr, momentum=0.9)


def setups(base, lr, modes):
    """mode -> (module to call, optimizer): each mode its own copy of the same start."""
    out = {}
    for mode in modes:
        model = fresh_copy(base)
        if mode in ("one", "apart"):
            out[mode] = (model, sgd(model.parameters(), lr))
        elif mode == "ddp":
            out[mode] = (DDP(model), sgd(model.parameters(), lr))
        else:
            opt = sgd(model.parameters(), lr)
            opt = hvd.DistributedOptimizer(
                opt, named_parameters=model.named_parameters(),
                compression=hvd.Compression.fp16 if mode == "fp16" else hvd.Compression.none)
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            hvd.broadcast_optimizer_state(opt, root_rank=0)
            out[mode] = (model, opt)
    return out


def train_step(model, opt, data):
    x, y = data
    opt.zero_grad()
    _loss_ce(model(x), y).backward()
    opt.step()


def thread_cpu():
    """{thread id: seconds it has run on a CPU} for this process's threads, from Linux's /proc
    (the scheduler's nanosecond sum where it shows it, else clock ticks); {} elsewhere."""
    out = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/sched") as f:
                line = next((x for x in f if x.startswith("se.sum_exec_runtime")), None)
            if line is not None:
                out[int(tid)] = float(line.split(":")[1]) / 1e3        # shown in ms
                continue
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[int(tid)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            pass                        # a thread that ended meanwhile
    return out


def run_steps(mode, setup, data, steps, cpu=None):
    """Seconds per step on this rank (0.0 on the ranks that sit out "1 process"). With `cpu` (a
    list [training thread, other threads, wall] in seconds), adds this call's CPU time: the
    thread that trains, and every other thread of the process (hvlite's coordinator, gloo's)."""
    dist.barrier()
    before = thread_cpu() if cpu is not None else None
    w0 = time.perf_counter()
    if mode == "one" and hvd.rank() != 0:
        dist.barrier()                  # idle while rank 0 trains alone (a socket wait, no spin)
        dt = 0.0
    else:
        model, opt = setup
        t0 = time.perf_counter()
        for _ in range(steps):
            train_step(model, opt, data)
        dt = (time.perf_counter() - t0) / steps
        if mode == "one":
            dist.barrier()
    if cpu is not None:
        after, me = thread_cpu(), threading.get_native_id()
        cpu[0] += after.get(me, 0.0) - before.get(me, 0.0)
        cpu[1] += sum(t - before.get(tid, 0.0) for tid, t in after.items() if tid != me)
        cpu[2] += time.perf_counter() - w0
    return dt


# ---- the comparison ---------------------------------------------------------------------------

def bench(name, args, modes):
    base, data, lr = build(name, args.seed)
    models = setups(base, lr, modes)
    for mode in modes:
        run_steps(mode, models[mode], data, args.warmup)
    times = {m: [] for m in modes}
    cpu = {m: [0.0, 0.0, 0.0] for m in modes} if args.cpu else {}
    for r in range(args.rounds):
        order = modes[r % len(modes):] + modes[:r % len(modes)]
        for mode in order:
            times[mode].append(run_steps(mode, models[mode], data, args.steps, cpu.get(mode)))
    everyone = hvd.allgather_object((times, cpu), name=f"bench.times.{name}")
    n, batch = hvd.size(), MODELS[name][2]
    sps = {}
    for mode in modes:
        per_round = [max(t[mode][r] for t, _ in everyone) for r in range(args.rounds)]
        glob = batch if mode == "one" else batch * n
        sps[mode] = statistics.median(glob / t for t in per_round)
    if args.cpu:
        steps = args.rounds * args.steps
        sps["cpu"] = {m: (statistics.mean(c[m][0] for _, c in everyone) / steps,
                          statistics.mean(c[m][1] for _, c in everyone) / steps,
                          sum(c[m][0] + c[m][1] for _, c in everyone) /
                          max(c[m][2] for _, c in everyone)) for m in modes}
    return sps


def fmt(x):
    return "-" if x is None or math.isnan(x) else f"{x:,.0f}"


def ratio(a, b):
    return None if a is None or b is None else a / b


def report(results, modes, args):
    n = hvd.size()
    one = lambda s: s.get("one")                             # noqa: E731
    eff = lambda s, m: ratio(s.get(m), None if one(s) is None else n * one(s))   # noqa: E731
    rows = []
    for name, sps in results.items():
        rows.append({"model": MODELS[name][0], "ranks": n,
                     **{MODES[m]: sps.get(m) for m in MODES},
                     **{f"{MODES[m]} efficiency": eff(sps, m) for m in ("ddp", "hvlite", "fp16")},
                     "hvlite / DDP": ratio(sps.get("hvlite"), sps.get("ddp")),
                     "hvlite fp16 / DDP": ratio(sps.get("fp16"), sps.get("ddp")),
                     "hvlite fp16 / hvlite": ratio(sps.get("fp16"), sps.get("hvlite"))})
    print(f"# samples/s, {n} ranks x 1 thread, same per-rank batch; medians of {args.rounds} "
          f"rotated rounds of {args.steps} steps ({args.warmup} warm-up); torch {torch.__version__}"
          f", hvlite {hvlite.__version__}, {hvlite.mpi_thread_level()}")
    print("| model | 1 process | DDP gloo (efficiency) | hvlite (efficiency) | hvlite fp16 "
          "(efficiency) | hvlite / DDP | hvlite fp16 / DDP |")
    print("|---|---|---|---|---|---|---|")

    def cell(row, m):
        v, e = row[MODES[m]], row.get(f"{MODES[m]} efficiency")
        return fmt(v) + ("" if e is None else f" ({e:.2f})")

    def x(v):
        return "-" if v is None else f"{v:.2f}x"

    for row in rows:
        print(f"| {row['model']} | {fmt(row['1 process'])} | {cell(row, 'ddp')} | "
              f"{cell(row, 'hvlite')} | {cell(row, 'fp16')} | {x(row['hvlite / DDP'])} | "
              f"{x(row['hvlite fp16 / DDP'])} |")
    print("# efficiency: samples/s on N ranks / (N x samples/s of 1 process)")
    if "apart" in modes:
        print("| model | no communication (every rank alone) | DDP / it | hvlite / it | "
              "hvlite fp16 / it | best hvlite / DDP possible |")
        print("|---|---|---|---|---|---|")
        for row in rows:
            bound = row[MODES["apart"]]
            print(f"| {row['model']} | {fmt(bound)} | {x(ratio(row['DDP gloo'], bound))} | "
                  f"{x(ratio(row['hvlite'], bound))} | {x(ratio(row['hvlite fp16'], bound))} | "
                  f"{x(ratio(bound, row['DDP gloo']))} |")
    if args.cpu:
        print(f"# CPU per step, the mean over ranks: the thread that trains, and every other "
              f"thread of the process (hvlite's coordinator, gloo's); busy: all ranks' CPU "
              f"seconds per second of the timed steps (this machine has {os.cpu_count()} cores)")
        print("| model | mode | training thread, ms | other threads, ms | busy |")
        print("|---|---|---|---|---|")
        for name, sps in results.items():
            for m in modes:
                main_s, other_s, busy = sps["cpu"][m]
                print(f"| {MODELS[name][0].split(',')[0]} | {MODES[m]} | {main_s * 1e3:.1f} | "
                      f"{other_s * 1e3:.1f} | {busy:.2f} |")
    if args.out:
        with open(args.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows({k: ("" if v is None else v) for k, v in r.items()} for r in rows)
        print(f"# wrote {args.out}")
    if args.plot:
        plot(rows, args.plot, n)


def plot(rows, path, n):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("# --plot: matplotlib is not installed; no plot written")
        return
    labels = [MODES[m] for m in ("one", "ddp", "hvlite", "fp16")]
    fig, axes = plt.subplots(1, len(rows), figsize=(4.2 * len(rows), 3.8), squeeze=False)
    for ax, row in zip(axes[0], rows):
        vals = [row[k] or 0.0 for k in labels]
        bars = ax.bar(range(len(labels)), vals, color=["#999999", "#4c72b0", "#dd8452", "#f2b880"])
        ax.set_xticks(range(len(labels)), labels, rotation=20, fontsize=8)
        ax.set_title(row["model"].split(",")[0], fontsize=10)
        ax.set_ylabel("samples/s")
        for b, k in zip(bars[1:], labels[1:]):
            e = row.get(f"{k} efficiency")
            if e is not None:
                ax.annotate(f"{e:.2f}", (b.get_x() + b.get_width() / 2, b.get_height()),
                            ha="center", va="bottom", fontsize=8)
    fig.suptitle(f"Training step throughput, {n} ranks (labels: efficiency)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"# wrote {path}")


# ---- the correctness check --------------------------------------------------------------------

def bits(t):
    """A tensor's bytes, for a comparison that NaN, -0.0 and rounding cannot fool."""
    return t.detach().contiguous().view(-1).view(torch.uint8)


def digest(params):
    h = hashlib.sha256()
    for _, p in params:
        h.update(bits(p).numpy().tobytes())
    return h.hexdigest()


def check(name, args):
    """True when DDP's and hvlite's parameters agree on every rank and each is the same on every
    rank. At 2 ranks they must be bitwise equal: a sum of two addends has one order, and DDP's
    scaling by 1/2 before the sum is exact. At other sizes the frameworks add in different orders
    (DDP also scales each addend by 1/N first) and 20 steps amplify the last-bit differences
    (up to ~1e-2 of a tensor's largest update at 4 ranks), so there the largest difference must
    stay under 5% of that update: it catches a wrong average or a lost gradient (~1), not
    rounding."""
    base, data, lr = build(name, args.seed)
    models = setups(base, lr, ["one", "ddp", "hvlite"])
    for _ in range(args.check_steps):
        for mode in ("one", "ddp", "hvlite"):
            train_step(*models[mode], data)
    params = {m: list(models[m][0].named_parameters()) for m in models}
    ddp_params = [(n.removeprefix("module."), p) for n, p in params["ddp"]]
    start = [p for _, p in base.named_parameters()]
    differ, worst = [], 0.0
    for (n, a), (_, b), p0 in zip(ddp_params, params["hvlite"], start):
        if not torch.equal(bits(a), bits(b)):
            differ.append(n)
            update = (a.detach() - p0.detach()).abs().max().item()
            diff = (a.detach() - b.detach()).abs().max().item()
            worst = max(worst, diff / update if update else math.inf)
    moved = any(not torch.equal(bits(p), bits(q))
                for (_, p), q in zip(params["hvlite"], start))
    local_differs = any(not torch.equal(bits(a), bits(b))
                        for (_, a), (_, b) in zip(ddp_params, params["one"]))
    mine = (digest(ddp_params), digest(params["hvlite"]), differ, worst, moved, local_differs)
    everyone = hvd.allgather_object(mine, name=f"bench.check.{name}")
    same_ddp = len({e[0] for e in everyone}) == 1
    same_hv = len({e[1] for e in everyone}) == 1
    bitwise = all(not e[2] for e in everyone)
    worst = max(e[3] for e in everyone)
    close = bitwise or (hvd.size() != 2 and worst <= 0.05)
    trained = all(e[4] for e in everyone)
    discriminates = hvd.size() == 1 or all(e[5] for e in everyone)
    ok = close and same_ddp and same_hv and trained and discriminates
    if hvd.rank() == 0:
        agree = ("yes" if bitwise else
                 f"{'no' if close else 'NO'} (max diff / max update {worst:.2g})")
        print(f"| {MODELS[name][0]} | {len(ddp_params)} | {agree} | "
              f"{'yes' if same_ddp else 'NO'} | {'yes' if same_hv else 'NO'} | "
              f"{'yes' if trained else 'NO'} | {'yes' if discriminates else 'NO'} | "
              f"{'ok' if ok else 'FAILED'} |")
        for r, e in enumerate(everyone):
            if e[2] and not close:
                print(f"#   rank {r}: {len(e[2])} tensors differ, first: {', '.join(e[2][:5])}")
    return ok


# ---- main -------------------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="mlp,resnet18,gpt", help="comma-separated: " +
                   ",".join(MODELS))
    p.add_argument("--modes", default="one,ddp,hvlite,fp16",
                   help="comma-separated subset of: one (1 process), ddp, hvlite, fp16, apart "
                        "(every rank alone at once, no communication)")
    p.add_argument("--rounds", type=int, default=7, help="rotated rounds (medians over them)")
    p.add_argument("--steps", type=int, default=10, help="timed steps per mode per round")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per mode first")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cpu", action="store_true",
                   help="also the CPU time per step: the training thread's, the other threads'")
    p.add_argument("--out", metavar="FILE.csv", help="also write the table as CSV")
    p.add_argument("--plot", metavar="FILE.png", help="also plot it (needs matplotlib)")
    p.add_argument("--check", action="store_true",
                   help="instead: DDP and hvlite parameters bitwise equal after --check-steps")
    p.add_argument("--check-steps", type=int, default=20)
    args = p.parse_args()
    names = [m for m in args.models.split(",") if m]
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in names if m not in MODELS] + [m for m in modes if m not in MODES]
    if bad or not names or not modes:
        p.error(f"unknown or empty --models/--modes: {', '.join(bad) or '(none)'}")

    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    hvd.init()
    init_gloo()
    try:
        if args.check:
            if hvd.rank() == 0:
                print(f"# after {args.check_steps} SGD steps from seed {args.seed}, "
                      f"{hvd.size()} ranks, different data per rank")
                print("| model | tensors | DDP == hvlite, bitwise | DDP same on every rank | "
                      "hvlite same on every rank | trained (moved from start) | "
                      "no-communication model differs | result |")
                print("|---|---|---|---|---|---|---|---|")
            ok = all([check(name, args) for name in names])
            if hvd.rank() == 0:
                print(f"# check {'passed' if ok else 'FAILED'}")
            status = 0 if ok else 1
        else:
            results = {name: bench(name, args, modes) for name in names}
            if hvd.rank() == 0:
                report(results, modes, args)
            status = 0
        dist.barrier()
    finally:
        dist.destroy_process_group()
        hvd.shutdown()
    sys.exit(status)


if __name__ == "__main__":
    main()
