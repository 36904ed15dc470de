"""A small GPT-style language model trained on device="pjrt", end to end.

Character-level model on text made in-process (sentences from a tiny seeded grammar: no
download), with dropout, bfloat16 autocast and AdamW, printing the loss and tokens/s of every
step and what the device did. After the first steps (compiles), every step is exactly two
executions of cached programs, launched without waiting: the forward and backward (with the
dropout masks' random numbers) as `optimizer.step()` begins, AdamW's updates as it ends.

    python examples/gpt.py                      # train on pjrt
    python examples/gpt.py --device cpu         # the same on CPU eager
    python examples/gpt.py --compare-cpu        # dropout 0: pjrt's loss curve against CPU's
"""

import argparse
import math
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SUBJECTS = ["the cat", "a dog", "my neighbour", "the old sailor", "every child", "the engineer", "a bird"]
VERBS = ["sees", "likes", "builds", "paints", "follows", "finds", "remembers", "carries"]
OBJECTS = ["a red boat", "the moon", "two apples", "the quiet river", "a tall tower", "the green door"]
ENDINGS = [" today", " at night", " again", " in the rain", "", " with care"]


def make_text(n_sentences=4000, seed=0):
    rng = random.Random(seed)
    return " ".join(f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}{rng.choice(ENDINGS)}."
                    for _ in range(n_sentences))


class Block(nn.Module):
    def __init__(self, dim, heads, dropout):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim), nn.Dropout(dropout))
        self.dropout = dropout

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        x = x + F.dropout(self.proj(y.transpose(1, 2).reshape(b, t, d)), self.dropout, self.training)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, context, dim=128, layers=4, heads=4, dropout=0.1):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(dim, heads, dropout) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied, as in GPT-2

    def forward(self, ids, targets):
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.drop(self.tok(ids) + self.pos(positions))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))


def batches(data, batch, context, seed):
    g = torch.Generator().manual_seed(seed)
    while True:
        starts = torch.randint(0, data.numel() - context - 1, (batch,), generator=g)
        x = torch.stack([data[s:s + context] for s in starts])
        y = torch.stack([data[s + 1:s + context + 1] for s in starts])
        yield x, y


def train(device, steps, batch, context, dropout, autocast, log=True, seed=0, compile=False):
    text = make_text()
    vocab = sorted(set(text))
    data = torch.tensor([vocab.index(c) for c in text])
    torch.manual_seed(seed)
    model = GPT(len(vocab), context, dropout=dropout).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
    pjrt = device.startswith("pjrt")
    if compile:  # forward and backward each become one replayed executable (torch_pjrt/dynamo.py)
        model = torch.compile(model, backend="pjrt" if pjrt else "inductor")
    stream = batches(data, batch, context, seed)
    losses = []
    if log:
        print(f"GPT: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, vocab {len(vocab)}, "
              f"context {context}, batch {batch}, dropout {dropout}, "
              f"autocast {'bfloat16' if autocast else 'off'}, device {device}"
              f"{', torch.compile' if compile else ''}")
    for step in range(steps):
        x, y = (t.to(device) for t in next(stream))
        before = torch.pjrt.metrics.counters() if pjrt else {}
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.split(":")[0], dtype=torch.bfloat16, enabled=autocast):
            loss = model(x, y)
        loss.backward()
        opt.step()
        sched.step()
        value = loss.item()  # the step's one sync
        seconds = time.perf_counter() - t0
        losses.append(value)
        if log:
            line = f"step {step:3d}  loss {value:.4f}  {batch * context / seconds:9.0f} tokens/s"
            if pjrt:
                after = torch.pjrt.metrics.counters()
                delta = {k: after.get(k, 0) - before.get(k, 0) for k in ("Executions", "GraphsCompiled", "FallbackOps")}
                line += (f"  executions {delta['Executions']}  compiles {delta['GraphsCompiled']}"
                         f"  fallbacks {delta['FallbackOps']}")
            print(line, flush=True)
    return losses


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="pjrt")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--no-autocast", dest="autocast", action="store_false")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile the model (backend pjrt on pjrt, inductor on the CPU)")
    parser.add_argument("--compare-cpu", action="store_true",
                        help="train with dropout 0 on pjrt and on the CPU and compare the loss curves")
    args = parser.parse_args()
    if args.compare_cpu:
        got = train("pjrt", args.steps, args.batch, args.context, 0.0, args.autocast, compile=args.compile)
        want = train("cpu", args.steps, args.batch, args.context, 0.0, args.autocast, log=False)
        worst = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(got, want))
        print(f"largest relative difference from the CPU loss curve: {worst:.2e}")
        return
    losses = train(args.device, args.steps, args.batch, args.context, args.dropout, args.autocast,
                   compile=args.compile)
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f} (uniform guess: {math.log(len(set(make_text()))):.3f})")
    if args.device.startswith("pjrt"):
        print(torch.pjrt.metrics.report())


if __name__ == "__main__":
    main()
