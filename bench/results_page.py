"""The results page that bench/attention.py, launch.py, pipelined.py and threads.py each write: a
title, the line saying which command produced it, where and when, the protocol, and the table."""

import os
import platform
from datetime import datetime


def results_page(title, script, intro, columns, rows, machine_extra=""):
    """The page's text. `intro` follows "Produced by ... (machine, N cores<machine_extra>): "."""
    produced = (f"Produced by `.venv/bin/python bench/{script}` on {datetime.now():%Y-%m-%d %H:%M} "
                f"({platform.machine()}, {os.cpu_count()} cores{machine_extra}): ")
    return "\n".join([f"# {title}", "", produced + intro, "", "| " + " | ".join(columns) + " |",
                      "|" + "---|" * len(columns), *rows, ""])
