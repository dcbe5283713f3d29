"""Run by test_torch.py: a Horovod-style torch script with only HVLITE_TIMELINE set (no spans
opened by hand). DistributedOptimizer records each step's compute on the timeline itself, so the
overlap report sees the all-reduces that ran during backward."""
import os
import sys

import torch

import hvlite.torch as hvd
from hvlite.timeline import report

STEPS = 12
hvd.init()
rank = hvd.rank()
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(12)])
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                               named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
x = torch.randn(64, 256)
for _ in range(STEPS):
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
path = os.environ["HVLITE_TIMELINE"]
hvd.shutdown()
if rank == 0:
    events = report.load(path)
    spans = [e for e in events if e.get("ph") == "X" and e.get("tid") == report.COMPUTE_TID]
    comm, hidden = report.overlap(events)["all"]
    print(f"compute spans {len(spans)} communication {comm:.0f} us hidden {hidden:.0f} us", flush=True)
    assert len(spans) == STEPS, f"{len(spans)} compute spans for {STEPS} steps"
    assert all(s["name"] == "compute (forward, backward)" for s in spans), spans[:2]
    # how much hid depends on the machine's load; that the report can see it does not
    assert comm > 0 and 0 <= hidden <= comm and all(s["dur"] > 0 for s in spans), (comm, hidden)
    print("timeline compute spans ok", flush=True)
sys.exit(0)
