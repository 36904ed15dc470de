"""Pipelined inference: a no_grad forward launched in pieces of `torch.pjrt.pipelined_launch_nodes()`
ops as it is traced (the default since 2026-11-29), against the whole forward as one program
launched at the read (`torch.pjrt.set_pipelined_launch_nodes(0)`), on the vision models of
bench/models.py and bench/zoo.py and two text encoders (docs/design.md, "Pipelined inference").

    .venv/bin/python bench/pipelined.py             # writes bench/pipelined_results.md
    .venv/bin/python bench/pipelined.py --only mobilenetv3 --blocks 4

Each model runs in a process of its own that holds both variants and alternates them in blocks
of steps (a step: the eval model's no_grad forward, its output summed and read with `.item()`),
since this machine's speed moves between processes by more than the differences measured. CPU
eager is not in the process: its OpenMP team beside the host-kernel thread's makes libgomp
throttle both (docs/design.md, "CPU eager after pjrt's host kernels"), which slowed pjrt's
MobileNetV3 inference from ~3.5 to ~5 ms per step; bench/models.py compares with eager and
inductor. Reported: median ms per step of each variant, the pieces per step, and the ratio.
"""

import sys
from pathlib import Path

from alternating import median_step_times, run_models, run_steps
from results_page import results_page

ROOT = Path(__file__).resolve().parent
MODELS = ["resnet18", "mobilenetv3", "vit_tiny", "efficientnet_b0", "convnext_atto", "regnetx_002",
          "deit_tiny", "mobilevit_xxs", "ghostnet_100", "densenet121", "bert", "distilbert"]
VARIANTS = ("pipelined", "one")


def build(name, device):
    """The model's inference step on `device`: a function returning the summed output."""
    import torch

    sys.path.insert(0, str(ROOT))
    from torchvision_compat import ensure_torchvision_importable

    ensure_torchvision_importable()
    import real_models
    import zoo_models

    builders = {**real_models.TEXT_MODELS, **real_models.VISION_MODELS, **zoo_models.MODELS}
    torch.manual_seed(0)
    model, batch, _ = builders[name](device)
    model.eval()
    text = hasattr(model, "config")

    def step():
        with torch.no_grad():
            out = model(input_ids=batch[0]) if text else model(batch[0])
            return (out if torch.is_tensor(out) else out.logits).sum()

    return step


def measure(name, blocks, per_block):
    """Median seconds per step of each variant, alternating block by block, and pieces per step."""
    import torch

    step = build(name, "pjrt")
    default = torch.pjrt.pipelined_launch_nodes()

    def run_variant(variant, n, times):
        torch.pjrt.set_pipelined_launch_nodes(default if variant == "pipelined" else 0)
        try:
            run_steps(step, n, times)
        finally:
            torch.pjrt.set_pipelined_launch_nodes(default)

    # 3 warm-up steps compile both variants' programs before timing.
    medians = median_step_times(VARIANTS, run_variant, 3, blocks, per_block)
    before = torch.pjrt.metrics.counters()
    run_variant("pipelined", 1, None)
    pieces = torch.pjrt.metrics.counters()["Executions"] - before["Executions"]
    return {**medians, "pieces": pieces}


def row(name, m):
    """The model's line of the results table."""
    return (f"| {name} | {m['pieces']} | {m['pipelined'] * 1e3:.2f} | {m['one'] * 1e3:.2f} "
            f"| {m['one'] / m['pipelined']:.2f} |")


def main():
    ran = run_models(__file__, measure, MODELS, 10, 20, row)
    if ran is None:
        return
    args, rows = ran
    text = results_page(
        "Pipelined inference against one program per forward", "pipelined.py",
        f"each model in a process of its own, the two variants alternating in {args.blocks} blocks of "
        f"{args.steps_per_block} no_grad forwards, each reading its summed output; medians. Pipelined: the "
        "trace launched every `torch.pjrt.pipelined_launch_nodes()` ops (the default; pieces: executions "
        "per step). One program: `set_pipelined_launch_nodes(0)`, the forward launched at the read. The "
        "speedup is the ratio of step times (above 1: pipelined is faster).",
        ["model", "pieces", "pipelined (ms)", "one program (ms)", "pipelined / one speedup"],
        rows)
    if args.only == MODELS:
        (ROOT / "pipelined_results.md").write_text(text)


if __name__ == "__main__":
    main()
