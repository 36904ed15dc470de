"""Shared test helpers."""
import contextlib
import glob
import os
import subprocess
import sys
import textwrap

import torch

DEVICE = "pjrt"


def run_python(code, env=None, timeout=300, check=True):
    """Runs `code` in a fresh interpreter; returns the CompletedProcess."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=full_env, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"subprocess failed ({proc.returncode}):\nSTDOUT:\n{proc.stdout}\nSTDERR:\n{proc.stderr}")
    return proc


def to_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.cpu()
    if isinstance(x, (list, tuple)):
        return type(x)(to_cpu(v) for v in x)
    return x


def to_pjrt(x, device=DEVICE):
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(to_pjrt(v, device) for v in x)
    return x


def assert_close(actual, expected, **kw):
    torch.testing.assert_close(to_cpu(actual), expected, **kw)


def ulps_from_float64(got, x, fn):
    """|got - fn(x in float64)| per element, in float32 ulps of the float64 value (0 where both
    are NaN): the accuracy of a float32 result against the exact one."""
    exact = fn(x.double())
    spacing = torch.finfo(torch.float32).eps * exact.abs().clamp_min(torch.finfo(torch.float32).tiny)
    both_nan = got.isnan() & exact.isnan()
    return torch.where(both_nan, 0.0, (got.double() - exact).abs() / spacing)


@contextlib.contextmanager
def dumping_graphs(directory):
    """Dumps the StableHLO of every graph compiled in this process inside the block."""
    torch.pjrt.set_dump_dir(str(directory))
    try:
        yield
    finally:
        torch.pjrt.set_dump_dir(None)


def dumped_text(directory):
    """The StableHLO of every graph dumped to `directory`, concatenated."""
    return "".join(open(p).read() for p in glob.glob(os.path.join(str(directory), "*.mlir")))


class Counters:
    """Counter deltas over a block: `with Counters() as c: ...; c["Executions"]`."""

    def __enter__(self):
        self.before = torch.pjrt.metrics.counters()
        return self

    def __exit__(self, *exc):
        self.after = torch.pjrt.metrics.counters()
        return False

    def __getitem__(self, name):
        # A plain name is one of the fixed counters, always present: a misspelt one must fail the
        # test rather than read 0 (c["CpuFallbacks"] did). Names with "::" (syncs per cause,
        # fallbacks per op, ...) appear once they first move.
        if "::" not in name and name not in self.after:
            raise KeyError(f"no counter named {name!r}; counters: {sorted(self.after)}")
        return self.after.get(name, 0) - self.before.get(name, 0)


def step_launches(c):
    """A lazy training step's executions by cause: (all, backward, before_optimizer_step,
    optimizer_step). The forward launches as its backward begins, the backward as
    `optimizer.step()` begins and the updates as it ends (docs/design.md, "The forward as a program
    of its own" and "The optimizer step as a program of its own"), so a step that nothing else
    syncs is (3, 1, 1, 1)."""
    return c["Executions"], c["Sync::backward"], c["Sync::before_optimizer_step"], c["Sync::optimizer_step"]
