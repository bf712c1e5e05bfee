"""Elastic training on scikit-learn's digits with PyTorch: kill a rank (even rank 0) and
the others go on from the last commit; give the job more slots and it grows.

    horovodlite-run --elastic -np 3 --min-np 1 python examples/pytorch_elastic.py
    horovodlite-run --elastic -np 2 --max-np 4 --host-discovery-script ./hosts.sh \
        python examples/pytorch_elastic.py            # hosts.sh prints e.g. "localhost:3"

Try `kill -9` on one of the ranks while it trains: the survivors restore the last
commit, re-form the world (ULFM), re-shard the rest of the epoch (ElasticSampler) and
carry on; the reset callback rescales the learning rate to the new size. The script
is a Horovod elastic script with its import line changed."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits

import horovodlite.torch as hvd


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=16, help="per rank")
    ap.add_argument("--lr", type=float, default=0.01, help="per rank; scaled by the number of ranks")
    ap.add_argument("--batches-per-commit", type=int, default=10)
    args = ap.parse_args()

    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(42)
    x, y = load_digits(return_X_y=True)
    dataset = torch.utils.data.TensorDataset(torch.tensor(x / 16.0, dtype=torch.float32),
                                             torch.tensor(y))
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=42)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, optimizer, train_sampler=sampler, epoch=0, batch=0)

    def on_reset():
        # The world changed size: keep the learning rate proportional to it.
        for group in optimizer.param_groups:
            group["lr"] = args.lr * hvd.size()
        if hvd.rank() == 0:
            print(f"world re-formed: {hvd.size()} ranks, resuming epoch {state.epoch} "
                  f"at batch {state.batch}", flush=True)

    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def train(state):
        while state.epoch < args.epochs:
            total = torch.zeros(2, dtype=torch.float64)
            # After a reset the sampler yields only what is left of the epoch, re-sharded.
            for i, (data, target) in enumerate(loader):
                optimizer.zero_grad()
                loss = F.cross_entropy(model(data), target)
                loss.backward()
                optimizer.step()
                state.train_sampler.record_batch(i, args.batch_size)
                state.batch += 1
                total += torch.tensor([loss.item() * len(target), len(target)], dtype=torch.float64)
                if state.batch % args.batches_per_commit == 0:
                    state.commit()
            total = hvd.allreduce(total, op=hvd.Sum, name="epoch_loss")
            if hvd.rank() == 0:
                print(f"epoch {state.epoch}: loss {float(total[0] / total[1]):.4f} on "
                      f"{hvd.size()} ranks", flush=True)
            state.epoch += 1
            state.batch = 0
            state.train_sampler.set_epoch(state.epoch)
            state.commit()

    train(state)
    if hvd.rank() == 0:
        print("done", flush=True)


if __name__ == "__main__":
    main()
