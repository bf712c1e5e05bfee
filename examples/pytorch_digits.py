"""A small CNN on scikit-learn's digits (8x8 images, 10 classes), trained data-parallel:
each rank trains on its own shard, DistributedOptimizer averages the gradients.

    mpirun -np 2 python examples/pytorch_digits.py

The only change from a Horovod script is the import line."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from tqdm import tqdm

import horovodlite.torch as hvd


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def accuracy(model, x, y):
    """Accuracy over the whole test set: each rank scores its shard, counts are summed."""
    model.eval()
    with torch.no_grad():
        correct = (model(x).argmax(1) == y).sum().to(torch.float64)
    model.train()
    counts = hvd.allreduce(torch.stack([correct, torch.tensor(float(len(y)), dtype=torch.float64)]),
                           op=hvd.Sum, name="test_accuracy")
    return float(counts[0] / counts[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--batch-size", type=int, default=32, help="per rank")
    ap.add_argument("--lr", type=float, default=0.001, help="per rank; scaled by the number of ranks")
    ap.add_argument("--fp16-allreduce", action="store_true", help="fp16 compression on the wire")
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()

    hvd.init()
    torch.set_num_threads(1)  # one core per rank
    torch.manual_seed(args.seed + hvd.rank())  # deliberately different: broadcast fixes it

    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x / 16.0, dtype=torch.float32).reshape(-1, 1, 8, 8)
    y = torch.tensor(y)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0,
                                                        stratify=y)
    shard = slice(hvd.rank(), None, hvd.size())
    x_train, y_train = x_train[shard], y_train[shard]
    x_test, y_test = x_test[shard], y_test[shard]

    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr * hvd.size())
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)

    # the same number of steps on every rank (shards may differ by one sample)
    steps = hvd.allreduce(torch.tensor(len(x_train) // args.batch_size), op=hvd.Min,
                          name="steps").item()
    gen = torch.Generator().manual_seed(args.seed + hvd.rank())
    for epoch in range(1, args.epochs + 1):
        order = torch.randperm(len(x_train), generator=gen)
        bar = tqdm(range(steps), desc=f"epoch {epoch}/{args.epochs}", leave=False,
                   disable=hvd.rank() != 0)
        for s in bar:
            idx = order[s * args.batch_size:(s + 1) * args.batch_size]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x_train[idx]), y_train[idx])
            loss.backward()
            optimizer.step()
            bar.set_postfix(loss=f"{loss.item():.3f}")
        acc = accuracy(model, x_test, y_test)
        if hvd.rank() == 0:
            print(f"epoch {epoch}: test accuracy {acc:.4f}", flush=True)


if __name__ == "__main__":
    main()
