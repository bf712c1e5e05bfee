"""Batch normalization with statistics over the whole global batch.

Forward: per-channel sums and counts are allreduced (Sum) for the mean, then the sums of
squared deviations from that mean for the variance: two small allreduces, and the same
numerics as a two-pass BatchNorm on the concatenated batch. Backward: the per-channel
sums of grad and grad*xhat are allreduced, so the input gradient is that of the global
batch; the weight and bias gradients stay local (DistributedOptimizer reduces them)."""
import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from ..basics import Sum
from ..process_sets import global_process_set
from .mpi_ops import allreduce


def _acc_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _per_channel(t):
    """(C, everything else) view of an (N, C, ...) tensor."""
    return t.transpose(0, 1).reshape(t.shape[1], -1)


def _bshape(v, ndim):
    return v.view(1, -1, *([1] * (ndim - 2)))


class _SyncBatchNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, process_set):
        acc = _acc_dtype(x.dtype)
        xc = _per_channel(x).to(acc)
        c = xc.shape[0]
        local = torch.cat([xc.sum(1), torch.tensor([float(xc.shape[1])], dtype=acc)])
        total = allreduce(local, op=Sum, process_set=process_set)
        count = total[c]
        if count <= 1 and running_var is not None:
            raise ValueError(f"horovodlite: SyncBatchNorm needs more than 1 value per channel "
                             f"over all ranks when training, got input shape {tuple(x.shape)}")
        mean = total[:c] / count
        sq = ((xc - mean[:, None]) ** 2).sum(1)
        var = allreduce(sq, op=Sum, process_set=process_set) / count
        invstd = torch.rsqrt(var + eps)
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
            unbiased = var * (count / (count - 1))
            running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
        xhat = (x.to(acc) - _bshape(mean, x.dim())) * _bshape(invstd, x.dim())
        y = xhat
        if weight is not None:
            y = y * _bshape(weight.to(acc), x.dim()) + _bshape(bias.to(acc), x.dim())
        ctx.save_for_backward(xhat, invstd, weight)
        ctx.count, ctx.process_set = count, process_set
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        xhat, invstd, weight = ctx.saved_tensors
        acc = xhat.dtype
        g = grad.to(acc)
        gc = _per_channel(g)
        c = gc.shape[0]
        sum_g = gc.sum(1)
        sum_gx = (gc * _per_channel(xhat)).sum(1)
        grad_weight = grad_bias = None
        if weight is not None:
            grad_weight = sum_gx.to(weight.dtype)
            grad_bias = sum_g.to(weight.dtype)
        grad_x = None
        if ctx.needs_input_grad[0]:
            total = allreduce(torch.cat([sum_g, sum_gx]), op=Sum, process_set=ctx.process_set)
            mean_g, mean_gx = total[:c] / ctx.count, total[c:] / ctx.count
            scale = invstd if weight is None else invstd * weight.to(acc)
            nd = g.dim()
            grad_x = (_bshape(scale, nd) * (g - _bshape(mean_g, nd) - xhat * _bshape(mean_gx, nd)))
            grad_x = grad_x.to(grad.dtype)
        return grad_x, grad_weight, grad_bias, None, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """BatchNorm over any (N, C, ...) input whose statistics are computed over the
    global batch of all ranks while training; in eval mode it is plain BatchNorm with
    the running statistics. Arguments as torch.nn.BatchNorm*d, plus `process_set`."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, device=None, dtype=None,
                 process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats,
                         device=device, dtype=dtype)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"horovodlite: SyncBatchNorm expects at least 2D input "
                             f"(got {input.dim()}D)")

    def _factor(self):
        """The running-average factor, as torch's BatchNorm computes it."""
        if not (self.training and self.track_running_stats):
            return 0.0 if self.momentum is None else self.momentum
        if self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
        if self.momentum is None:
            return 1.0 / float(self.num_batches_tracked)
        return self.momentum

    def forward(self, input):
        self._check_input_dim(input)
        factor = self._factor()
        use_batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        if not (self.training and use_batch_stats) or self.process_set.size() == 1:
            track = not self.training or self.track_running_stats
            return F.batch_norm(input, self.running_mean if track else None,
                                self.running_var if track else None, self.weight, self.bias,
                                use_batch_stats, factor, self.eps)
        running = self.track_running_stats and self.running_mean is not None
        return _SyncBatchNormFunction.apply(
            input, self.weight, self.bias, self.running_mean if running else None,
            self.running_var if running else None, self.eps, factor, self.process_set)

    @classmethod
    def convert_sync_batchnorm(cls, module, process_set=global_process_set):
        """A copy-free conversion: every BatchNorm*d in `module` becomes a SyncBatchNorm
        sharing its parameters and buffers."""
        out = module
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            out = cls(module.num_features, module.eps, module.momentum, module.affine,
                      module.track_running_stats, process_set=process_set)
            if module.affine:
                with torch.no_grad():
                    out.weight = module.weight
                    out.bias = module.bias
            out.running_mean = module.running_mean
            out.running_var = module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.training = module.training
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child, process_set))
        return out
