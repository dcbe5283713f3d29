"""The digits task with a small torch model through hvlite.torch (Horovod's spelling).

    hvliterun -np 2 python examples/train_torch.py
"""
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import hvlite.torch as hvd  # noqa: E402
from train_digits import load_data  # noqa: E402


def main():
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(hvd.rank())                       # different on purpose: broadcast fixes it
    (xtr, ytr), (xte, yte) = load_data()
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05 * hvd.size(), momentum=0.9),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    batch, per_rank = 64, 64 // hvd.size()
    rng = np.random.default_rng(0)
    x, y = torch.from_numpy(xtr), torch.from_numpy(ytr)
    for _epoch in range(20):
        order = rng.permutation(len(xtr))
        for s in range(len(xtr) // batch):
            idx = order[s * batch:(s + 1) * batch][hvd.rank() * per_rank:(hvd.rank() + 1) * per_rank]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    with torch.no_grad():
        acc = (model(torch.from_numpy(xte)).argmax(1).numpy() == yte).mean()
    if hvd.rank() == 0:
        print(f"ranks {hvd.size()}: test accuracy {acc:.1%}")
    hvd.shutdown()


if __name__ == "__main__":
    main()
