"""A Horovod PyTorch training script, written the way Horovod's examples are, on scikit-learn's
bundled digits. Its only hvlite-specific line is the import: with
`import horovod.torch as hvd` it is a plain Horovod script.

    hvliterun -np 2 python examples/horovod_compat.py
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data.distributed
from sklearn.datasets import load_digits

import hvlite.torch as hvd

parser = argparse.ArgumentParser(description="Horovod-style digits example")
parser.add_argument("--batch-size", type=int, default=32, help="input batch size per rank")
parser.add_argument("--epochs", type=int, default=15)
parser.add_argument("--lr", type=float, default=0.05, help="learning rate for one rank")
parser.add_argument("--momentum", type=float, default=0.5)
parser.add_argument("--seed", type=int, default=42)
parser.add_argument("--fp16-allreduce", action="store_true", help="fp16 compression")
parser.add_argument("--use-adasum", action="store_true")
parser.add_argument("--gradient-predivide-factor", type=float, default=1.0)
parser.add_argument("--sync-bn", action="store_true", help="use hvd.SyncBatchNorm")


class Net(nn.Module):
    def __init__(self, sync_bn):
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.bn = hvd.SyncBatchNorm(128) if sync_bn else nn.BatchNorm1d(128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.bn(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


def metric_average(val, name):
    tensor = torch.tensor(val)
    avg_tensor = hvd.allreduce(tensor, name=name)
    return avg_tensor.item()


def main():
    args = parser.parse_args()
    hvd.init()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.int64)
    train_dataset = torch.utils.data.TensorDataset(x[:1400], y[:1400])
    test_dataset = torch.utils.data.TensorDataset(x[1400:], y[1400:])
    # Partition the data among the ranks.
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        train_dataset, num_replicas=hvd.size(), rank=hvd.rank())
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size,
                                               sampler=train_sampler)
    test_sampler = torch.utils.data.distributed.DistributedSampler(
        test_dataset, num_replicas=hvd.size(), rank=hvd.rank(), shuffle=False)
    test_loader = torch.utils.data.DataLoader(test_dataset, batch_size=100, sampler=test_sampler)

    model = Net(args.sync_bn)
    # Adasum does not scale the learning rate with the number of ranks.
    lr_scaler = hvd.size() if not args.use_adasum else 1
    optimizer = optim.SGD(model.parameters(), lr=args.lr * lr_scaler, momentum=args.momentum)

    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression,
                                         op=hvd.Adasum if args.use_adasum else hvd.Average,
                                         gradient_predivide_factor=args.gradient_predivide_factor)

    for epoch in range(1, args.epochs + 1):
        model.train()
        train_sampler.set_epoch(epoch)
        for data, target in train_loader:
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()
        if hvd.rank() == 0 and epoch % 5 == 0:
            print(f"epoch {epoch}: last loss {loss.item():.4f}")

    model.eval()
    test_loss, test_accuracy = 0.0, 0.0
    with torch.no_grad():
        for data, target in test_loader:
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            test_accuracy += output.argmax(1).eq(target).float().sum().item()
    test_loss = metric_average(test_loss / len(test_sampler), "avg_loss")
    test_accuracy = metric_average(test_accuracy / len(test_sampler), "avg_accuracy")
    weights = hvd.allgather_object(sum(p.sum().item() for p in model.parameters()))
    if hvd.rank() == 0:
        print(f"Test set: average loss {test_loss:.4f}, accuracy {100.0 * test_accuracy:.1f}%")
        print(f"parameters identical on every rank: {len(set(weights)) == 1}")


if __name__ == "__main__":
    main()
