"""pjrt's fused scaled_dot_product_attention (docs/design.md, "Attention") against torch's math
path, which every call took before it, on the transformer workloads of bench/models.py.

    .venv/bin/python bench/attention.py                # writes bench/attention_results.md
    .venv/bin/python bench/attention.py --only gpt2 --blocks 4

Each model runs in one process that holds both variants and alternates them in blocks of steps
(`torch.nn.attention.sdpa_kernel([SDPBackend.MATH])` selects the math path): across processes this
machine's steps/s moved by up to 2x between runs, far more than the difference measured. Reported:
median lazy training step (tracing and its executions) and median torch.accelerator.Graph
replay of the same step (execution only), each with the speedup math / fused.
"""

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

from results_page import results_page

ROOT = Path(__file__).resolve().parent
MODELS = ["gpt2", "bert", "llama", "t5", "vit_tiny"]
VARIANTS = ("fused", "math")


def variant(name):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return contextlib.nullcontext() if name == "fused" else sdpa_kernel([SDPBackend.MATH])


def build(name, capturable):
    import torch

    sys.path.insert(0, str(ROOT))
    import real_models
    from torchvision_compat import ensure_torchvision_importable

    ensure_torchvision_importable()
    torch.manual_seed(0)
    builders = {**real_models.TEXT_MODELS, **real_models.VISION_MODELS}
    return real_models.adamw_training_step(builders[name]("pjrt"), capturable)


def alternate(steps, blocks, per_block):
    """Median seconds per step of each variant, the variants alternating block by block."""
    times = {v: [] for v in VARIANTS}
    for b in range(blocks):
        for v in (VARIANTS if b % 2 == 0 else VARIANTS[::-1]):
            with variant(v):
                for _ in range(per_block):
                    t0 = time.perf_counter()
                    steps[v]().item()
                    times[v].append(time.perf_counter() - t0)
    return {v: statistics.median(t) for v, t in times.items()}


def measure(name, blocks, per_block):
    from graph_replay import graph_replayer

    lazy_step = build(name, capturable=False)
    for v in VARIANTS:  # compile both variants' graphs before timing
        with variant(v):
            for _ in range(4):
                lazy_step().item()
    lazy = alternate({v: lazy_step for v in VARIANTS}, blocks, per_block)
    graph_step = build(name, capturable=True)
    replayers = {}
    for v in VARIANTS:  # each variant captured under its own backend choice
        with variant(v):
            replayers[v] = graph_replayer(graph_step)
            for _ in range(4):
                replayers[v]().item()
    graph = alternate(replayers, blocks, per_block)
    return lazy, graph


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", nargs="*", default=MODELS)
    parser.add_argument("--blocks", type=int, default=12)
    parser.add_argument("--steps-per-block", type=int, default=15)
    args = parser.parse_args()
    rows = []
    for name in args.only:
        lazy, graph = measure(name, args.blocks, args.steps_per_block)
        row = (f"| {name} | {lazy['math'] * 1e3:.2f} | {lazy['fused'] * 1e3:.2f} | {lazy['math'] / lazy['fused']:.2f} "
               f"| {graph['math'] * 1e3:.2f} | {graph['fused'] * 1e3:.2f} | {graph['math'] / graph['fused']:.2f} |")
        print(row, flush=True)
        rows.append(row)
    text = results_page(
        "Fused attention against torch's math path", "attention.py",
        f"each model in one process, the two variants alternating in {args.blocks} blocks of "
        f"{args.steps_per_block} training steps (AdamW), medians. Lazy: the traced step and its executions. "
        "Graph: the same step replayed by torch.accelerator.Graph (execution only). Speedup: math / fused.",
        ["model", "lazy math (ms)", "lazy fused (ms)", "speedup", "graph math (ms)", "graph fused (ms)", "speedup"],
        rows)
    if args.only == MODELS:
        (ROOT / "attention_results.md").write_text(text)


if __name__ == "__main__":
    main()
