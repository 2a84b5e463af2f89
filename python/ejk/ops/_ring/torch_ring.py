"""ring_attention's PyTorch side: the ring over a torch.distributed process group (gloo on the
CPU, NCCL on CUDA), each hop a batch of isend/irecv started before the step's kernels and waited
for after them, and an autograd.Function whose backward is the ring of flash_attention_backward
calls (ring_attention.backward). A rank knows its own index, so its schedule is plain Python: a
fully masked block runs nothing."""
import torch
import torch.distributed as dist

from ... import _kit
from .. import ring_attention as _ring


class _Pending:
    """A hop in flight: the sent tensors are kept alive until the receives are waited for."""

    def __init__(self, requests, sent, received):
        self.requests, self.sent, self.received = requests, sent, received

    def wait(self):
        for r in self.requests:
            r.wait()
        return self.received


class Backend:
    """What ring_attention's loops call, for one schedule on rank `rank` of `group`."""

    def __init__(self, fw, schedule, group, rank):
        self.fw, self.schedule, self.group, self.rank, self.n = fw, schedule, group, rank, schedule.n
        self.scalars = dict(schedule.scalars)
        if group is not None:
            self.next = dist.get_global_rank(group, (rank + 1) % self.n)
            self.prev = dist.get_global_rank(group, (rank - 1) % self.n)

    def send_next(self, xs):
        sent = tuple(x.contiguous() for x in xs)
        received = tuple(torch.empty_like(x) for x in sent)
        ops = [op for x, buf in zip(sent, received)
               for op in (dist.P2POp(dist.isend, x, self.next, self.group),
                          dist.P2POp(dist.irecv, buf, self.prev, self.group))]
        return _Pending(dist.batch_isend_irecv(ops), sent, received)

    @staticmethod
    def same_calls(step):
        """A rank runs its own schedule: the state may differ in type between ranks."""
        return True

    def step(self, step, fn, state, kv):
        s = self.schedule
        return fn(_ring.plan(s.layout, s.n, self.rank, step, s.sq, s.sk, s.band), state, kv)

    def _mask(self, c):
        return dict(causal=c.causal, sliding_window=c.window, **self.scalars)

    def flash(self, q, k, v, c, extra):
        r = self.fw.call("flash_attention", q=q, k=k, v=v, **extra, **self._mask(c))
        return r["out"], r["lse"]

    def flash_backward(self, q, k, v, out, lse, d_out, c, extra):
        r = self.fw.call("flash_attention_backward", q=q, k=k, v=v, out=out, lse=lse.contiguous(), d_out=d_out,
                         **extra, **self._mask(c))
        return tuple(r[name] for name in ("dq", "dk", "dv")) + ((r["dbias"],) if "bias" in extra else ())

    def shard_start(self, step):
        """The first key column of the visiting shard at `step` in the bias (the ring's keys in
        rank order)."""
        return ((self.rank - step) % self.n) * self.schedule.sk

    @staticmethod
    def bias_block(bias, col, c):
        return bias[:, :, c.q0:c.q0 + c.nq, col:col + c.nk]

    @staticmethod
    def add_bias_block(acc, col, c, g):
        acc[:, :, c.q0:c.q0 + c.nq, col:col + c.nk].add_(g)
        return acc

    def merge(self, out_a, lse_a, out_b, lse_b):
        r = self.fw.call("merge_attention_states", out_a=out_a, lse_a=lse_a.contiguous(), out_b=out_b,
                         lse_b=lse_b.contiguous())
        return r["out"], r["lse"]

    @staticmethod
    def put(acc, axis, start, x):
        acc.narrow(axis, start, x.shape[axis]).copy_(x)
        return acc

    @staticmethod
    def add(acc, axis, start, x):
        acc.narrow(axis, start, x.shape[axis]).add_(x)
        return acc

    @staticmethod
    def f32(x):
        return x.float()

    @staticmethod
    def zeros_like(x):
        return torch.zeros(x.shape, dtype=torch.float32, device=x.device)

    @staticmethod
    def empty_lse(q):
        return torch.full((q.shape[0], q.shape[2], q.shape[1]), -torch.inf, dtype=torch.float32, device=q.device)


def _sink_lse(aux):
    s = torch.logsumexp(aux, dim=-1)
    return s[None, :, None] if aux.dim() == 2 else s


def add_sinks(out, lse, aux):
    """out, lse of the keys, with the sinks joining the denominator once."""
    total = torch.logaddexp(lse, _sink_lse(aux).expand_as(lse))
    return out * torch.exp(lse - total).transpose(1, 2)[..., None], total


def sink_gradient(aux, lse, out, d_out):
    """d softmax_aux from this rank's rows: -sum of each sink's probability times d_out . out."""
    rows = torch.einsum("bshd,bshd->bhs", d_out.float(), out.float())
    heads = aux if aux.dim() == 2 else aux.expand((lse.shape[1],) + tuple(aux.shape))
    p = torch.exp(heads[None, :, None, :] - lse[..., None])
    d = -torch.einsum("bhst,bhs->ht", p, rows)
    return d if aux.dim() == 2 else d.sum(0)


class _Ring(torch.autograd.Function):
    @staticmethod
    def forward(ctx, be, q, k, v, aux, bias, q_ids, kv_ids):
        out, lse = _ring.forward(be, q, k, v, q_ids, kv_ids, bias)
        if aux is not None:
            out, lse = add_sinks(out, lse, aux)
        out = out.to(q.dtype)
        ctx.be = be
        ctx.save_for_backward(q, k, v, aux, bias, out, lse, q_ids, kv_ids)
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, aux, bias, out, lse, q_ids, kv_ids = ctx.saved_tensors
        be = ctx.be
        dq, dk, dv, d_bias = _ring.backward(be, q, k, v, out, lse, d_out.to(q.dtype).contiguous(), q_ids, kv_ids,
                                            bias)
        d_aux = None
        if aux is not None and ctx.needs_input_grad[4]:
            d_aux = sink_gradient(aux, lse, out, d_out)
            if be.group is not None:  # the sinks are shared by every rank's rows: the whole gradient on each
                dist.all_reduce(d_aux, group=be.group)
        d_bias = d_bias.to(bias.dtype) if bias is not None and ctx.needs_input_grad[5] else None
        return None, dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), d_aux, d_bias, None, None


class _RankRows(torch.autograd.Function):
    """This rank's rows [start, start + rows) of a bias every rank holds whole; the gradient is
    the whole bias's, summed over the ranks (every rank's rows meet the loss on that rank only)."""

    @staticmethod
    def forward(ctx, bias, start, rows, group):
        ctx.start, ctx.rows, ctx.group, ctx.shape, ctx.dtype = start, rows, group, bias.shape, bias.dtype
        return bias[:, :, start:start + rows]

    @staticmethod
    def backward(ctx, grad):
        whole = torch.zeros(ctx.shape, dtype=torch.float32, device=grad.device)
        whole[:, :, ctx.start:ctx.start + ctx.rows].copy_(grad)
        dist.all_reduce(whole, group=ctx.group)
        return whole.to(ctx.dtype), None, None, None


def run(fw, layout, q, k, v, aux, bias, band, scalars, axis, sharding, ids=None):
    mesh, in_specs, out_specs = sharding
    fw.refuse("ring_attention", mesh=mesh is not None, in_specs=in_specs is not None,
              out_specs=out_specs is not None)
    if axis is None:
        group, n, rank = None, 1, 0
    else:
        if not isinstance(axis, dist.ProcessGroup):
            raise _kit.ArgumentTypeError(f"axis_name: expected a torch.distributed ProcessGroup (e.g. "
                                         f"torch.distributed.group.WORLD) or None, got {type(axis).__name__}")
        group, n, rank = axis, dist.get_world_size(axis), dist.get_rank(axis)
    _ring.check_lengths(layout, q, k)
    if bias is not None and _ring.bias_rows(bias, q, k, n) == "ring":
        bias = _RankRows.apply(bias, rank * q.shape[1], q.shape[1], group)
    schedule = _ring.Schedule(n, layout, q.shape[1], k.shape[1], band, tuple(sorted(scalars.items())))
    q_ids, kv_ids = (None, None) if ids is None else (x.contiguous() for x in ids)
    return _Ring.apply(Backend(fw, schedule, group, rank), q.contiguous(), k.contiguous(), v.contiguous(), aux, bias,
                       q_ids, kv_ids)
