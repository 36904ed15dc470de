"""The building blocks of the real models, one at a time: pjrt (lazy) against CPU eager.

    .venv/bin/python bench/ops.py      ->  bench/ops_results.md

Each block (forward and backward where it has one) is one pjrt execution per call, timed from the
call to the end of `torch.pjrt.synchronize()`, so a pjrt time includes tracing, the launch and the
wait for XLA's worker threads (~0.1-0.2 ms on a 2-core machine): the blocks where pjrt loses by
more than that are the ones whose lowering XLA:CPU runs slowly. Shapes are GPT-sized: batch 8,
sequence 64, width 128, vocabulary 1000. Runs in this process with a fresh compile cache.
"""

import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TORCH_PJRT_CACHE_DIR", tempfile.mkdtemp(prefix="torch_pjrt_ops_cache_"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
B, S, D, V = 8, 64, 128, 1000
TOKENS = B * S


def grads(out, *inputs):
    return torch.autograd.grad(out.sum(), inputs)


def t(*sizes, grad=False):
    return torch.randn(*sizes, requires_grad=grad)


def ids():
    return torch.randint(0, V, (TOKENS,))


def rotary(x):
    """transformers' Llama rotary embedding of x [batch, heads, seq, dim]: cos and sin of the
    positions times the inverse frequencies, made each call, as the model makes them each step."""
    dim, seq = x.shape[-1], x.shape[-2]
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, device=x.device).float() / dim))
    freqs = torch.arange(seq, device=x.device).float()[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], -1).expand(x.shape[0], seq, dim)[:, None]
    rotated = torch.cat([-x[..., dim // 2:], x[..., : dim // 2]], -1)
    return x * emb.cos() + rotated * emb.sin()


# name -> (function, inputs made on the CPU); the same seed makes both devices' inputs.
BLOCKS = {
    "row max ([512, 1000] logits)": (lambda x: x.amax(-1), lambda: [t(TOKENS, V)]),
    "argmax ([512, 1000] logits)": (lambda x: x.argmax(-1), lambda: [t(TOKENS, V)]),
    "row sum ([512, 1000])": (lambda x: x.sum(-1), lambda: [t(TOKENS, V)]),
    "exp ([512, 1000])": (lambda x: x.exp(), lambda: [t(TOKENS, V)]),
    "bias gradient ([8, 64, 512] summed over (0, 1))": (lambda g: g.sum((0, 1)), lambda: [t(B, S, 4 * D)]),
    "log_softmax": (lambda x: F.log_softmax(x, -1), lambda: [t(TOKENS, V)]),
    "log_softmax fwd+bwd": (lambda x: grads(F.log_softmax(x, -1) * 1.5, x), lambda: [t(TOKENS, V, grad=True)]),
    "cross_entropy fwd+bwd": (lambda x, y: grads(F.cross_entropy(x, y), x), lambda: [t(TOKENS, V, grad=True), ids()]),
    "softmax fwd+bwd ([8, 4, 64, 64])": (lambda x: grads(torch.softmax(x, -1) * 1.5, x),
                                         lambda: [t(B, 4, S, S, grad=True)]),
    "layer_norm fwd+bwd": (lambda x, w, b: grads(F.layer_norm(x, (D,), w, b), x, w, b),
                           lambda: [t(B, S, D, grad=True), t(D, grad=True), t(D, grad=True)]),
    "gelu (tanh) fwd+bwd": (lambda x: grads(F.gelu(x, approximate="tanh"), x), lambda: [t(B, S, 4 * D, grad=True)]),
    "embedding fwd+bwd": (lambda w, i: grads(F.embedding(i, w), w), lambda: [t(V, D, grad=True), ids()]),
    "linear 128->512 fwd+bwd": (lambda x, w, b: grads(F.linear(x, w, b), x, w, b),
                                lambda: [t(TOKENS, D, grad=True), t(4 * D, D, grad=True), t(4 * D, grad=True)]),
    "sin ([512, 1000])": (lambda x: x.sin(), lambda: [t(TOKENS, V)]),
    "atan2 ([512, 1000])": (lambda y, x: torch.atan2(y, x), lambda: [t(TOKENS, V), t(TOKENS, V)]),
    "x ** 2.5 ([512, 1000])": (lambda x: x.abs() ** 2.5, lambda: [t(TOKENS, V)]),
    "x % 0.7 ([512, 1000])": (lambda x: x % 0.7, lambda: [t(TOKENS, V)]),
    "rotary embedding fwd+bwd (Llama's cos/sin, [8, 4, 64, 32])": (
        lambda q, k: grads(rotary(q) * rotary(k), q, k), lambda: [t(B, 4, S, 32, grad=True) for _ in range(2)]),
    "causal attention fwd+bwd": (
        lambda q, k, v: grads(F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v),
        lambda: [t(B, 4, S, 32, grad=True) for _ in range(3)]),
}


def time_block(fn, make, device, calls=100):
    torch.manual_seed(0)
    args = [a.detach().to(device).requires_grad_(a.requires_grad) for a in make()]

    def call():
        out = fn(*args)
        if device == "pjrt":
            torch.pjrt.synchronize()
        return out

    for _ in range(5):  # compiles, then warm
        call()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def backend_times(device):
    """Milliseconds per call of every block on `device`, measured in a child process."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", device],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps({name: time_block(fn, make, sys.argv[2]) for name, (fn, make) in BLOCKS.items()}))
        return 0
    eager, pjrt = backend_times("cpu"), backend_times("pjrt")
    rows = []
    for name in BLOCKS:
        rows.append(f"| {name} | {pjrt[name]:.3f} | {eager[name]:.3f} | {pjrt[name] / eager[name]:.2f} |")
        print(rows[-1], flush=True)
    lines = [
        "# Model building blocks, one at a time",
        "",
        f"Produced by `.venv/bin/python bench/ops.py` on {datetime.date.today()} ({platform.machine()}, "
        f"{os.cpu_count()} cores). Milliseconds per call, median of 100, each backend in a process "
        "of its own; a pjrt call is one execution including its launch and the wait for it (see the "
        "script's docstring).",
        "",
        "| block | pjrt (ms) | CPU eager (ms) | pjrt / eager |",
        "|---|---|---|---|",
        *rows,
        "",
    ]
    with open(os.path.join(HERE, "ops_results.md"), "w") as f:
        f.write("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
