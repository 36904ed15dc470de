"""Where a lazy training step launches: the forward as its backward begins, the backward as
`optimizer.step()` begins and the updates as it ends (three executions, the default since
2026-11-29), against the forward and backward as one program launched as `optimizer.step()`
begins (two executions, `torch.pjrt.set_launch_forward_at_backward(False)`: the default from
2026-11-28), the whole step as one program launched at its end (also
`torch_pjrt._launch_before_optimizer_step = False`), and CPU eager, on bench/models.py's training
workloads plus the GPT example (docs/design.md, "The forward as a program of its own" and "The
optimizer step as a program of its own").

    .venv/bin/python bench/launch.py                # writes bench/launch_results.md
    .venv/bin/python bench/launch.py --only bert --blocks 4

Each model runs in a process of its own that holds all four variants and alternates them in
blocks of steps, each step reading its loss: across processes this machine's steps/s moved by up
to 2x between runs, more than the differences measured (and CPU eager ran 2-4x slower for some
models in a process that had run other models on pjrt before). The eager column is slowed where
the model has convolutions (ViT-tiny's patch embedding, ResNet-18, MobileNetV3): pjrt's host
kernels start an OpenMP team, which throttles eager's (docs/design.md, "CPU eager after pjrt's
host kernels"); bench/models.py measures eager in a process of its own. Reported: median ms per
step of each, and the ratios three launches / two, two / one, and three / eager.
"""

import sys
from pathlib import Path

from alternating import median_step_times, run_models, run_steps
from results_page import results_page

ROOT = Path(__file__).resolve().parent
MODELS = ["gpt2", "bert", "llama", "t5", "vit_tiny", "lstm", "resnet18", "mobilenetv3", "gpt_example"]
VARIANTS = ("three", "two", "one", "eager")


def gpt_example(device):
    """bench/workloads.py's GPT workload: examples/gpt.py's model, batch 16 x 64 tokens."""
    import torch

    sys.path.insert(0, str(ROOT.parent / "examples"))
    import gpt as example

    x = torch.randint(0, 32, (16, 64)).to(device)
    y = torch.randint(0, 32, (16, 64)).to(device)
    return example.GPT(32, 64, dropout=0.0).to(device), (x, y), lambda model, x, y: model(x, y)


def build(name, device):
    """The model's AdamW training step on `device`, returning its loss."""
    import torch

    sys.path.insert(0, str(ROOT))
    import real_models
    from torchvision_compat import ensure_torchvision_importable

    ensure_torchvision_importable()
    builders = {**real_models.TEXT_MODELS, **real_models.VISION_MODELS, **real_models.PLAIN_MODELS,
                "gpt_example": gpt_example}
    torch.manual_seed(0)
    return real_models.adamw_training_step(builders[name](device))


def measure(name, blocks, per_block):
    """Median seconds per step of each variant, alternating block by block."""
    import torch_pjrt

    import torch

    pjrt_step = build(name, "pjrt")
    steps = {"three": pjrt_step, "two": pjrt_step, "one": pjrt_step, "eager": build(name, "cpu")}

    def run_variant(variant, n, times):
        torch.pjrt.set_launch_forward_at_backward(variant == "three")
        torch_pjrt._launch_before_optimizer_step = variant != "one"
        try:
            run_steps(steps[variant], n, times)
        finally:
            torch.pjrt.set_launch_forward_at_backward(True)
            torch_pjrt._launch_before_optimizer_step = True

    # 4 warm-up steps compile every launch pattern's programs before timing.
    return median_step_times(VARIANTS, run_variant, 4, blocks, per_block)


def row(name, m):
    """The model's line of the results table."""
    return (f"| {name} | {m['three'] * 1e3:.2f} | {m['two'] * 1e3:.2f} | {m['one'] * 1e3:.2f} "
            f"| {m['eager'] * 1e3:.2f} | {m['two'] / m['three']:.2f} | {m['one'] / m['two']:.2f} "
            f"| {m['eager'] / m['three']:.2f} | {m['eager'] / m['two']:.2f} |")


def main():
    ran = run_models(__file__, measure, MODELS, 12, 12, row)
    if ran is None:
        return
    args, rows = ran
    text = results_page(
        "Launches per lazy training step", "launch.py",
        f"each model in a process of its own, the four variants alternating in {args.blocks} blocks of "
        f"{args.steps_per_block} AdamW training steps, each step reading its loss; medians. Three launches: "
        "the forward as its backward begins, the backward as `optimizer.step()` begins, the updates as it "
        "ends (the default; where the forward's results hold over 512k elements, ViT-tiny, ResNet-18, "
        "MobileNetV3 and the GPT example here, the same two launches as the next column). Two launches: the forward and backward launched as `optimizer.step()` begins, "
        "the updates as it ends (`torch.pjrt.set_launch_forward_at_backward(False)`). One program: the whole "
        "step launched as `optimizer.step()` ends. Speedup columns are ratios of step times.",
        ["model", "three launches (ms)", "two launches (ms)", "one program (ms)", "CPU eager (ms)",
         "three / two speedup", "two / one speedup", "three launches / eager", "two launches / eager"],
        rows)
    if args.only == MODELS:
        (ROOT / "launch_results.md").write_text(text)


if __name__ == "__main__":
    main()
