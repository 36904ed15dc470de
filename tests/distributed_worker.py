"""Run by tests/test_distributed.py under torchrun: one process per rank, each on its own pjrt
device. Every check compares with what CPU computes for the same data (the expected values of a
collective from each rank's known inputs; training against the same model trained on the full
batch on the CPU, without torch.distributed). Prints "ok <phase>" per phase that passed.

    python -m torch.distributed.run --standalone --nproc-per-node=2 tests/distributed_worker.py \
        collectives ddp fsdp dcp <checkpoint dir>
"""
import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn as nn

RANK = WORLD = 0


def pjrt(t):
    return t.to("pjrt")


def check(name, got, expected, **tol):
    got = got.cpu() if isinstance(got, torch.Tensor) else got
    torch.testing.assert_close(got, expected, msg=lambda m: f"rank {RANK}, {name}: {m}", **tol)


def rank_values(r, n=4, dtype=torch.float32):
    """Rank r's input: distinct per rank and element, exact in float32."""
    return (torch.arange(n, dtype=torch.float64) * 3 + r + 1).to(dtype)


# ---------------------------------------------------------------------------------- collectives

def check_all_reduce():
    everyone = torch.stack([rank_values(r) for r in range(WORLD)])
    expected = {dist.ReduceOp.SUM: everyone.sum(0), dist.ReduceOp.PRODUCT: everyone.prod(0),
                dist.ReduceOp.MIN: everyone.min(0).values, dist.ReduceOp.MAX: everyone.max(0).values,
                dist.ReduceOp.AVG: everyone.mean(0)}
    for op, want in expected.items():
        x = pjrt(rank_values(RANK))
        dist.all_reduce(x, op=op)
        check(f"all_reduce {op}", x, want)
    x = pjrt(rank_values(RANK))
    dist.all_reduce(x, op=dist._make_nccl_premul_sum(0.5))
    check("all_reduce PREMUL_SUM", x, everyone.sum(0) * 0.5)
    ints = torch.stack([torch.tensor([r + 1, 2 ** r, 7]) for r in range(WORLD)])
    bitwise = {dist.ReduceOp.BAND: ints[0], dist.ReduceOp.BOR: ints[0], dist.ReduceOp.BXOR: ints[0]}
    for r in range(1, WORLD):
        bitwise[dist.ReduceOp.BAND] = bitwise[dist.ReduceOp.BAND] & ints[r]
        bitwise[dist.ReduceOp.BOR] = bitwise[dist.ReduceOp.BOR] | ints[r]
        bitwise[dist.ReduceOp.BXOR] = bitwise[dist.ReduceOp.BXOR] ^ ints[r]
    for op, want in bitwise.items():
        x = pjrt(ints[RANK].clone())
        dist.all_reduce(x, op=op)
        check(f"all_reduce {op} int64", x, want)
    x = pjrt(ints[RANK].clone())
    dist.all_reduce(x, op=dist.ReduceOp.AVG)
    check("all_reduce AVG int64 (truncates)", x, torch.div(ints.sum(0), WORLD, rounding_mode="trunc"))
    x = pjrt(rank_values(RANK, dtype=torch.bfloat16))
    dist.all_reduce(x)
    check("all_reduce bfloat16", x, everyone.sum(0).to(torch.bfloat16))
    # A view: the result lands in the base tensor.
    base = pjrt(torch.zeros(2, 4))
    base[1].copy_(pjrt(rank_values(RANK)))
    dist.all_reduce(base[1])
    check("all_reduce of a view", base, torch.stack([torch.zeros(4), everyone.sum(0)]))


def check_rooted():
    x = pjrt(rank_values(RANK))
    dist.broadcast(x, src=WORLD - 1)
    check("broadcast", x, rank_values(WORLD - 1))
    x = pjrt(rank_values(RANK))
    dist.reduce(x, dst=0, op=dist.ReduceOp.MAX)
    if RANK == 0:
        check("reduce", x, rank_values(WORLD - 1))
    gathered = [pjrt(torch.empty(4)) for _ in range(WORLD)] if RANK == 0 else None
    dist.gather(pjrt(rank_values(RANK)), gathered, dst=0)
    if RANK == 0:
        for r, t in enumerate(gathered):
            check(f"gather from {r}", t, rank_values(r))
    out = pjrt(torch.empty(4))
    pieces = [pjrt(rank_values(r) * 10) for r in range(WORLD)] if RANK == 0 else None
    dist.scatter(out, pieces, src=0)
    check("scatter", out, rank_values(RANK) * 10)


def check_gathers_and_scatters():
    everyone = [rank_values(r) for r in range(WORLD)]
    outs = [pjrt(torch.empty(4)) for _ in range(WORLD)]
    dist.all_gather(outs, pjrt(rank_values(RANK)))
    for r in range(WORLD):
        check(f"all_gather [{r}]", outs[r], everyone[r])
    flat = pjrt(torch.empty(WORLD * 4))
    dist.all_gather_into_tensor(flat, pjrt(rank_values(RANK)))
    check("all_gather_into_tensor", flat, torch.cat(everyone))
    # reduce_scatter: rank r gets the sum over ranks of everyone's r-th chunk.
    inputs = [pjrt(rank_values(RANK) + 100 * c) for c in range(WORLD)]
    out = pjrt(torch.empty(4))
    dist.reduce_scatter(out, inputs)
    check("reduce_scatter", out, sum(rank_values(r) + 100 * RANK for r in range(WORLD)))
    out = pjrt(torch.empty(4))
    dist.reduce_scatter_tensor(out, pjrt(torch.cat([rank_values(RANK) * (c + 1) for c in range(WORLD)])),
                               op=dist.ReduceOp.AVG)
    check("reduce_scatter_tensor AVG", out, sum(rank_values(r) for r in range(WORLD)) * (RANK + 1) / WORLD)
    # all_to_all: rank r sends chunk c to rank c.
    outs = [pjrt(torch.empty(4)) for _ in range(WORLD)]
    dist.all_to_all(outs, [pjrt(rank_values(RANK) + 10 * c) for c in range(WORLD)])
    for r in range(WORLD):
        check(f"all_to_all from {r}", outs[r], rank_values(r) + 10 * RANK)
    out = pjrt(torch.empty(WORLD * 2))
    dist.all_to_all_single(out, pjrt(torch.arange(WORLD * 2.0) + 100 * RANK))
    want = torch.cat([torch.arange(2.0) + 2 * RANK + 100 * r for r in range(WORLD)])
    check("all_to_all_single", out, want)


def check_point_to_point():
    right, left = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    got = pjrt(torch.zeros(4))
    requests = dist.batch_isend_irecv([dist.P2POp(dist.isend, pjrt(rank_values(RANK)), right),
                                       dist.P2POp(dist.irecv, got, left)])
    for request in requests:
        request.wait()
    check("isend/irecv ring", got, rank_values(left))
    if RANK == 0:
        dist.send(pjrt(torch.tensor([42.0])), dst=1)
    elif RANK == 1:
        got = pjrt(torch.zeros(1))
        dist.recv(got, src=0)
        check("send/recv", got, torch.tensor([42.0]))
    dist.barrier()


def check_async_and_functional():
    everyone = torch.stack([rank_values(r) for r in range(WORLD)])
    x = pjrt(rank_values(RANK))
    work = dist.all_reduce(x, async_op=True)
    assert work.wait()
    check("async all_reduce", x, everyone.sum(0))
    check("async all_reduce future", work.get_future().wait()[0], everyone.sum(0))
    group = dist.group.WORLD
    y = pjrt(rank_values(RANK))
    check("funcol.all_reduce", funcol.all_reduce(y, "sum", group), everyone.sum(0))
    check("funcol.all_reduce leaves its input", y, rank_values(RANK))
    check("funcol.all_gather_tensor", funcol.all_gather_tensor(y, 0, group), everyone.reshape(-1))
    z = pjrt(torch.cat([rank_values(RANK)] * WORLD))
    check("funcol.reduce_scatter_tensor", funcol.reduce_scatter_tensor(z, "sum", 0, group), everyone.sum(0))
    check("funcol.all_to_all_single",
          funcol.all_to_all_single(pjrt(torch.arange(float(WORLD)) + 10 * RANK), None, None, group),
          torch.tensor([10.0 * r + RANK for r in range(WORLD)]))
    # CPU tensors in the same group are gloo's, untouched by the pjrt backend.
    c = rank_values(RANK)
    dist.all_reduce(c)
    check("all_reduce of a CPU tensor", c, everyone.sum(0))


def check_coalesced():
    everyone = torch.stack([rank_values(r) for r in range(WORLD)])
    a, b = pjrt(rank_values(RANK)), pjrt(rank_values(RANK)[:2] * 2)
    with dist._coalescing_manager():
        dist.all_reduce(a)
        dist.all_reduce(b)
    check("coalescing manager all_reduce a", a, everyone.sum(0))
    check("coalescing manager all_reduce b", b, everyone[:, :2].sum(0) * 2)
    a, b = pjrt(rank_values(RANK)), pjrt(rank_values(RANK)[:2])
    dist.all_reduce_coalesced([a, b], op=dist.ReduceOp.MAX)
    check("all_reduce_coalesced", torch.cat([a.cpu(), b.cpu()]),
          torch.cat([everyone.max(0).values, everyone[:, :2].max(0).values]))
    flat = pjrt(torch.empty(WORLD * 4))
    with dist._coalescing_manager():
        dist.all_gather_into_tensor(flat, pjrt(rank_values(RANK)))
    check("coalesced all_gather_into_tensor", flat, everyone.reshape(-1))
    objects = [None] * WORLD
    dist.all_gather_object(objects, {"rank": RANK})
    assert objects == [{"rank": r} for r in range(WORLD)], objects


def phase_collectives(args):
    check_all_reduce()
    check_coalesced()
    check_rooted()
    check_gathers_and_scatters()
    check_point_to_point()
    check_async_and_functional()
    counted = torch.pjrt.metrics.collectives()
    for name in ("allreduce", "broadcast", "allgather", "reduce_scatter", "all_to_all", "send", "recv"):
        assert counted.get(name, 0) > 0, (name, counted)
    assert not torch.pjrt.metrics.fallbacks(), torch.pjrt.metrics.fallbacks()


# ---------------------------------------------------------------------------------- training

STEPS, BATCH, SEQ, DIM = 3, 8, 6, 32


class TinyTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(DIM, DIM)
        self.block = nn.TransformerEncoderLayer(DIM, nhead=4, dim_feedforward=64, dropout=0.0,
                                                batch_first=True)
        self.head = nn.Linear(DIM, 1)

    def forward(self, x):
        return self.head(self.block(self.embed(x))).squeeze(-1)


def batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(BATCH, SEQ, DIM, generator=g), torch.randn(BATCH, SEQ, generator=g))
            for _ in range(STEPS)]


def new_model():
    torch.manual_seed(0)
    return TinyTransformer()


def train(model, params, data, shard):
    """SGD steps on `shard(x), shard(y)` of each batch; mean-squared loss over the shard. (Not
    Adam: the attention's key bias has a gradient of zero up to rounding, which Adam's
    normalization would blow up into noise of the learning rate's size.)"""
    optimizer = torch.optim.SGD(params, lr=0.1, momentum=0.9)
    for x, y in data:
        loss = nn.functional.mse_loss(model(shard(x)), shard(y))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def reference_parameters():
    """The model trained on the whole batch on the CPU: what data-parallel training must give."""
    model = new_model()
    train(model, model.parameters(), batches(), lambda t: t)
    return [p.detach() for p in model.parameters()]


def my_shard(t):
    return pjrt(t.chunk(WORLD)[RANK])


def phase_ddp(args):
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = new_model().to("pjrt")
    ddp = DDP(model)
    train(ddp, ddp.parameters(), batches(), my_shard)
    for got, want in zip(model.parameters(), reference_parameters()):
        check("DDP parameter", got, want, rtol=1e-4, atol=1e-5)
    assert not torch.pjrt.metrics.fallbacks(), torch.pjrt.metrics.fallbacks()


def fully_sharded_model():
    from torch.distributed.fsdp import fully_shard

    model = new_model().to("pjrt")
    for module in (model.embed, model.block, model.head):
        fully_shard(module)
    fully_shard(model)
    return model


def phase_fsdp(args):
    model = fully_sharded_model()
    assert model.embed.weight.to_local().shape[0] == DIM // WORLD  # really sharded
    train(model, model.parameters(), batches(), my_shard)
    for got, want in zip(model.parameters(), reference_parameters()):
        check("FSDP2 parameter", got.full_tensor(), want, rtol=1e-4, atol=1e-5)


def phase_dcp(args):
    """Saves an FSDP2 model and optimizer with torch.distributed.checkpoint, loads them into a
    fresh one, and checks both then train identically."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    path = args[0]
    data = batches()
    model = fully_sharded_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    nn.functional.mse_loss(model(my_shard(data[0][0])), my_shard(data[0][1])).backward()
    optimizer.step()
    optimizer.zero_grad()
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=path)

    restored = fully_sharded_model()
    restored_optimizer = torch.optim.AdamW(restored.parameters(), lr=1e-2)
    model_state, optim_state = get_state_dict(restored, restored_optimizer)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(restored, restored_optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    for m, opt in ((model, optimizer), (restored, restored_optimizer)):
        nn.functional.mse_loss(m(my_shard(data[1][0])), my_shard(data[1][1])).backward()
        opt.step()
    for a, b in zip(model.parameters(), restored.parameters()):
        check("parameter after DCP restore and a step", b.full_tensor(), a.full_tensor().cpu(),
              rtol=0, atol=0)


PHASES = {"collectives": phase_collectives, "ddp": phase_ddp, "fsdp": phase_fsdp, "dcp": phase_dcp}


def main(argv):
    global RANK, WORLD
    dist.init_process_group("cpu:gloo,pjrt:pjrt")
    RANK, WORLD = dist.get_rank(), dist.get_world_size()
    assert (torch.pjrt.global_rank(), torch.pjrt.world_size()) == (RANK, WORLD)
    phases = [a for a in argv if a in PHASES]
    rest = [a for a in argv if a not in PHASES]
    for name in phases:
        PHASES[name](rest)
        print(f"rank {RANK}: ok {name}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
