"""A sampler that remembers which samples were processed this epoch, so that after the
world was re-formed the rest of the epoch is re-sharded over the new ranks instead of
starting the epoch again (Horovod's hvd.elastic.ElasticSampler)."""
import math
import random

import torch.utils.data


class ElasticSampler(torch.utils.data.Sampler):
    """Shards `dataset` over the current world (rank r takes every size-th of the
    remaining indices). Call record_batch(batch_idx, batch_size) (or record_indices)
    after each batch, and set_epoch(epoch) when an epoch ends. Kept in a TorchState
    (as a keyword), it is saved at commit, restored after a failure, and its processed
    indices are merged across ranks and re-sharded at every reset."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_indices = set()
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices = []
        self.num_samples = 0
        self.total_size = 0
        self.indices = []
        self.reset()

    def set_epoch(self, epoch):
        """A new epoch: nothing is processed yet, and the order is reshuffled."""
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Marks this rank's batch `batch_idx` (of `batch_size`) as processed."""
        self.record_indices(self.get_indices(batch_idx, batch_size))

    def record_indices(self, indices):
        self.processed_indices.update(int(i) for i in indices)

    def get_indices(self, batch_idx, batch_size):
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_indices = set(state_dict["processed_indices"])
        self.reset()

    def state_dict(self):
        return dict(epoch=self.epoch, processed_indices=sorted(self.processed_indices))

    def reset(self):
        """Shards what is left of this epoch over the current world."""
        from ...basics import rank, size

        self.num_replicas, self.rank = size(), rank()
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = [i for i in order if i not in self.processed_indices]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas
        # Pad so every rank has the same number of batches (as DistributedSampler).
        padded = list(self.remaining_indices)
        while padded and len(padded) < self.total_size:
            padded += padded[:self.total_size - len(padded)]
        self.indices = padded[self.rank:self.total_size:self.num_replicas]

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
