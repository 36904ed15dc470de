"""The model zoo on pjrt against CPU eager: twenty architectures beyond bench/models.py's
(bench/zoo_models.py: timm EfficientNet, ConvNeXt, RegNet, DeiT, MobileViT, GhostNet, DenseNet,
Swin, MLP-Mixer; transformers DistilBERT, RoBERTa, ELECTRA, ALBERT, GPT-Neo, OPT, Mistral, Qwen2,
Phi, Gemma, BART), small configs, random weights, dropout off.

    .venv/bin/python bench/zoo.py                   # writes bench/zoo_results.md and .json
    .venv/bin/python bench/zoo.py --only swin_small_config bart

Each model runs in a process of its own, with an empty compile cache, and reports:
- the first training step from the same weights on both devices: the loss's relative difference
  and the whole gradient's (all parameters' gradients as one vector, the norm of the difference
  over the norm of CPU's). Only the first step: with batch norms over two images, ReLUs and
  SGD, float32 rounding decides which near-zero activations pass a gradient, and a few steps
  later the two runs have drifted apart as a CPU float32 run drifts from a float64 one
  (docs/design.md, "The model zoo");
- four SGD (momentum) steps on pjrt: the CPU fallbacks, the executions per step from the third
  step on and the programs lowered there (0: the first two steps made every program the later
  ones run);
- inference (eval, no_grad): the logits' largest relative difference;
- speed: AdamW training steps/s, median over steps 4 to 12, the better of two rounds that
  alternate the devices in the one process, and pjrt's first forward and backward on an empty
  compile cache (the compile of their program; the optimizer's is not in it).
Ratios come from one process each; this machine's speed moves by up to 2x within minutes
(docs/design.md, "Benchmark noise"), so bench/models.py's protocol is the one to quote.
"""

import argparse
import copy
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent
SPEED_STEPS = 12


def _relative(got, want):
    """The largest difference relative to `want`'s largest magnitude."""
    got, want = got.detach().cpu().double(), want.detach().cpu().double()
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()


def _sgd_steps(model, batch, loss_fn, steps=4):
    import torch

    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses, executions, lowered = [], [], []
    for _ in range(steps):
        before = torch.pjrt.metrics.counters()
        opt.zero_grad()
        loss = loss_fn(model, *batch)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        after = torch.pjrt.metrics.counters()
        executions.append(after["Executions"] - before["Executions"])
        lowered.append(after["GraphsLowered"] - before["GraphsLowered"])
    return losses, executions, lowered


def _logits(model, batch):
    import torch

    model.eval()
    with torch.no_grad():
        out = model(batch[0]) if not hasattr(model, "config") else model(input_ids=batch[0])
    return out if torch.is_tensor(out) else out.logits


def _speed(builder, device, cpu_model):
    """The median time of AdamW steps 4 to SPEED_STEPS on `device` from `cpu_model`'s weights."""
    import torch

    _, batch, loss_fn = builder(device)
    model = copy.deepcopy(cpu_model).to(device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    times = []
    for _ in range(SPEED_STEPS):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model, *batch)
        loss.backward()
        opt.step()
        loss.item()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[3:])


def _first_gradients(model, batch, loss_fn):
    """The loss and every parameter's gradient (one flat float64 vector) of one backward."""
    import torch

    loss = loss_fn(model, *batch)
    loss.backward()
    grads = [p.grad.detach().cpu().double().flatten() for p in model.parameters() if p.grad is not None]
    return loss.item(), torch.cat(grads)


def measure(name):
    """Runs in the child process: one JSON line on stdout."""
    import torch

    sys.path.insert(0, str(ROOT))
    from torchvision_compat import ensure_torchvision_importable

    ensure_torchvision_importable()
    import zoo_models

    builder = zoo_models.MODELS[name]
    torch.manual_seed(0)
    initial, cpu_batch, loss_fn = builder("cpu")
    dev_batch = tuple(t.to("pjrt") for t in cpu_batch)
    fallbacks_before = sum(torch.pjrt.metrics.fallbacks().values())
    want_loss, want_grad = _first_gradients(copy.deepcopy(initial), cpu_batch, loss_fn)
    t0 = time.perf_counter()
    got_loss, got_grad = _first_gradients(copy.deepcopy(initial).to("pjrt"), dev_batch, loss_fn)
    first_backward_s = time.perf_counter() - t0
    _, executions, lowered = _sgd_steps(copy.deepcopy(initial).to("pjrt"), dev_batch, loss_fn)
    out = {"model": name, "params_m": sum(p.numel() for p in initial.parameters()) / 1e6,
           "loss_rel_diff": abs(got_loss - want_loss) / max(abs(want_loss), 1e-30),
           "grad_rel_diff": ((got_grad - want_grad).norm() / want_grad.norm().clamp_min(1e-30)).item(),
           # SGD's first step makes its momentum buffers (a program of its own); from the
           # third step on nothing should be new.
           "executions_per_step": statistics.mean(executions[2:]), "lowered_after_step_2": sum(lowered[2:])}
    out["logits_rel_diff"] = _relative(_logits(copy.deepcopy(initial).to("pjrt"), dev_batch),
                                       _logits(copy.deepcopy(initial), cpu_batch))
    out["fallbacks"] = sum(torch.pjrt.metrics.fallbacks().values()) - fallbacks_before
    rounds = [(_speed(builder, "cpu", initial), _speed(builder, "pjrt", initial)) for _ in range(2)]
    out["eager_steps_per_s"] = max(1 / eager for eager, _ in rounds)
    out["pjrt_steps_per_s"] = max(1 / pjrt for _, pjrt in rounds)
    out["pjrt_first_backward_s"] = first_backward_s
    print(json.dumps(out), flush=True)


def run_child(name):
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TORCH_PJRT_CACHE_DIR=cache)
        proc = subprocess.run([sys.executable, __file__, "--child", name], env=env, capture_output=True, text=True)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"model": name, "error": (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]}


def table(results):
    header = ("| model | params (M) | first loss rel. diff | first gradient rel. diff | logits rel. diff (eval) "
              "| fallbacks | executions / step | programs lowered after step 2 | pjrt first forward + backward (s) "
              "| pjrt steps/s | eager steps/s | pjrt / eager |")
    rows = [header, "|" + "---|" * (header.count("|") - 1)]
    for r in results:
        if "error" in r:
            rows.append(f"| {r['model']} | failed: {r['error']} |" + " |" * (header.count("|") - 3))
            continue
        rows.append(f"| {r['model']} | {r['params_m']:.1f} | {r['loss_rel_diff']:.1e} | {r['grad_rel_diff']:.1e} "
                    f"| {r['logits_rel_diff']:.1e} | {r['fallbacks']} | {r['executions_per_step']:.2f} "
                    f"| {r['lowered_after_step_2']} | {r['pjrt_first_backward_s']:.1f} | {r['pjrt_steps_per_s']:.1f} "
                    f"| {r['eager_steps_per_s']:.1f} | {r['pjrt_steps_per_s'] / r['eager_steps_per_s']:.2f} |")
    return "\n".join(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="models to run (default: all)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return measure(args.child)
    sys.path.insert(0, str(ROOT))
    import zoo_models

    names = args.only or list(zoo_models.MODELS)
    results = []
    for name in names:
        results.append(run_child(name))
        print(json.dumps(results[-1]), flush=True)
    stamp = datetime.now().strftime("%Y-%m-%d %H:%M")
    text = (f"# Model zoo\n\nProduced by `.venv/bin/python bench/zoo.py` on {stamp} ({platform.machine()}, "
            f"{os.cpu_count()} cores). See the script's docstring for what each column measures; speed "
            f"ratios come from one process per model (bench/models_results.md has the careful protocol).\n\n"
            + table(results) + "\n")
    if args.only:
        print(text)
        return
    (ROOT / "zoo_results.md").write_text(text)
    (ROOT / "zoo_results.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
