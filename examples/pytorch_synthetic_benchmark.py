"""Synthetic training throughput: a ResNet on random images, gradients averaged by
DistributedOptimizer. Prints images/sec per rank and in total (mean +- 1.96 std over
the timed iterations), like Horovod's pytorch_synthetic_benchmark.

    mpirun -np 2 python examples/pytorch_synthetic_benchmark.py --model resnet18

The ResNets are defined here (torchvision is not needed); on CPUs the defaults use
small images so that a run takes seconds, not hours."""
import argparse
import os
import timeit

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, width, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.down = _downsample(cin, width, stride)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.down is None else self.down(x)))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, width, stride=1):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = _downsample(cin, cout, stride)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.down is None else self.down(x)))


def _downsample(cin, cout, stride):
    if stride == 1 and cin == cout:
        return None
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))


class ResNet(nn.Module):
    def __init__(self, block, layers, num_classes=1000, base=64):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, base, 7, 2, 3, bias=False), nn.BatchNorm2d(base),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        stages, cin = [], base
        for i, n in enumerate(layers):
            width = base * 2 ** i
            blocks = []
            for j in range(n):
                blocks.append(block(cin, width, 2 if (j == 0 and i > 0) else 1))
                cin = width * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


MODELS = {
    # The small ResNet-style CNN of the training-speed measurements (2.77 M parameters,
    # 11 MB of gradients in 38 tensors): a step is short, so engine overheads show.
    "smallcnn": lambda: ResNet(BasicBlock, [1, 1, 1, 1], num_classes=10, base=48),
    "resnet18": lambda: ResNet(BasicBlock, [2, 2, 2, 2]),
    "resnet34": lambda: ResNet(BasicBlock, [3, 4, 6, 3]),
    "resnet50": lambda: ResNet(Bottleneck, [3, 4, 6, 3]),
    "resnet101": lambda: ResNet(Bottleneck, [3, 4, 23, 3]),
}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet18", choices=sorted(MODELS))
    ap.add_argument("--batch-size", type=int, default=16, help="per rank")
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--num-warmup-batches", type=int, default=3)
    ap.add_argument("--num-batches-per-iter", type=int, default=5)
    ap.add_argument("--num-iters", type=int, default=5)
    ap.add_argument("--fp16-allreduce", action="store_true")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    return ap.parse_args(argv)


def run(args, hvd, log=print):
    """Times training steps; returns the per-iteration images/sec of this rank."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = MODELS[args.model]()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size(), momentum=0.9)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=compression)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.randint(0, model.fc.out_features, (args.batch_size,))

    def benchmark_step():
        optimizer.zero_grad()
        F.cross_entropy(model(data), target).backward()
        optimizer.step()

    log(f"Model: {args.model}, batch size {args.batch_size}, image size {args.image_size}, "
        f"{hvd.size()} rank(s), {args.threads} thread(s) each")
    log("Running warmup...")
    timeit.timeit(benchmark_step, number=args.num_warmup_batches)
    log("Running benchmark...")
    img_secs = []
    for i in range(args.num_iters):
        t = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
        img_sec = args.batch_size * args.num_batches_per_iter / t
        log(f"Iter #{i}: {img_sec:.1f} img/sec per rank")
        img_secs.append(img_sec)
    return img_secs


def main():
    args = parse_args()
    import horovodlite.torch as hvd

    hvd.init()
    log = print if hvd.rank() == 0 else (lambda *a, **k: None)
    img_secs = run(args, hvd, log)
    mean, conf = np.mean(img_secs), 1.96 * np.std(img_secs)
    log(f"Img/sec per rank: {mean:.1f} +-{conf:.1f}")
    log(f"Total img/sec on {hvd.size()} rank(s): {hvd.size() * mean:.1f} +-{hvd.size() * conf:.1f}")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
