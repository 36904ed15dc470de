"""Lock-step rounds, the steady-state protocol bench/models.py and bench/run.py share.

This machine's speed moves by up to 2x between minutes, so rates measured in processes that run
one after another compare the minutes as much as the backends. In a lock-step round every backend
has a process of its own (serve), already warm, and the processes take turns: each runs a block
of ~BLOCK_SECONDS of steps while the others wait on their stdin, the order reversed every other
block, so a slow stretch falls on all of them alike. A backend's step time is the median step of
all its blocks.
"""

import json
import statistics
import subprocess
import sys
import tempfile
import time

BLOCK_SECONDS = 0.4  # how long each block of a lock-step round runs


def timed_units(unit, n):
    """Seconds of each of `n` calls of `unit`."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        unit()
        times.append(time.perf_counter() - t0)
    return times


def serve(unit, warmup, report):
    """The child's side of a round: runs `warmup` timed calls of `unit` (one step, its result read)
    and reports ready, then runs the blocks the parent asks for ("run N" on stdin, one JSON line of
    step times back each) until "done", answered with `report(median step seconds of all blocks)`."""
    first = timed_units(unit, warmup)
    print(json.dumps({"ready": True, "first_steps_s": first[:2], "step_s": first[-1]}), flush=True)
    all_times = []
    for line in sys.stdin:
        words = line.split()
        if words[0] == "done":
            break
        times = timed_units(unit, int(words[1]))
        all_times += times
        print(json.dumps({"times": times}), flush=True)
    print(json.dumps(report(statistics.median(all_times) if all_times else None)), flush=True)


class ServingChild:
    """A serving child process (`cmd`, running serve) and its JSON-lines protocol."""

    def __init__(self, cmd, env):
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True)

    def ask(self, command):
        try:
            self.proc.stdin.write(command + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # it exited: reply() reports why
        return self.reply()

    def reply(self):
        """The child's next JSON line (other output skipped), or its error once it exited."""
        for line in self.proc.stdout:
            if line.startswith("{"):
                return json.loads(line)
        self.proc.wait()
        self.log.seek(0)
        lines = self.log.read().strip().splitlines()
        return {"error": lines[-1] if lines else f"exited with {self.proc.returncode}"}

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.log.close()


def block_steps(step_s):
    """Steps per block for a step of `step_s` seconds: ~BLOCK_SECONDS, at least 2, at most 50."""
    return max(2, min(50, round(BLOCK_SECONDS / max(step_s, 1e-4))))


def run_round(start, names, blocks):
    """One round over `names`: `start(name)` makes each one's ServingChild, one after another (each
    warms up while the others wait, so its first steps are timed alone), then `blocks` blocks in
    turn. Returns, per name, its first steps, `step_s` (the median step of its blocks) and what
    its "done" answered, or its error."""
    children, out, times = {}, {}, {}
    try:
        for name in names:
            child = start(name)
            ready = child.reply()
            if "error" in ready:
                out[name] = ready
                child.close()
                continue
            children[name], times[name] = child, []
            out[name] = {"first_steps_s": ready["first_steps_s"], "per_block": block_steps(ready["step_s"])}
        for b in range(blocks):
            order = [n for n in children if "error" not in out[n]]
            for name in (order if b % 2 == 0 else order[::-1]):
                reply = children[name].ask(f"run {out[name]['per_block']}")
                if "error" in reply:
                    out[name] = reply
                else:
                    times[name] += reply["times"]
        for name, child in children.items():
            if "error" not in out[name]:
                out[name].update(child.ask("done"), step_s=statistics.median(times[name]))
    finally:
        for child in children.values():
            child.close()
    return out
