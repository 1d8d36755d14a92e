"""CPU seconds of this process and everything it started, split JVM / Python workers / driver.

A diagnostic for `bench.pipeline`: the machines here are shared, and a batch's wall time
grows with what else runs, while the CPU seconds the job itself spends on it hardly do. So
each batch's CPU (from /proc, Linux only; zero elsewhere) is printed beside its wall time,
split by who spent it: the Spark JVM, the Python workers (read tasks, the window stage) and
the driver's own Python. A process that exited is still counted: its parent's `cutime`
holds it once reaped (Spark's Python daemon reaps its workers).
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class CpuSplit:
    jvm_s: float = 0.0
    python_workers_s: float = 0.0
    driver_s: float = 0.0  # this process (the driver's Python, the bench itself)

    @property
    def total_s(self) -> float:
        return self.jvm_s + self.python_workers_s + self.driver_s

    def __sub__(self, other: CpuSplit) -> CpuSplit:
        return CpuSplit(
            self.jvm_s - other.jvm_s,
            self.python_workers_s - other.python_workers_s,
            self.driver_s - other.driver_s,
        )

    def __add__(self, other: CpuSplit) -> CpuSplit:
        return CpuSplit(
            self.jvm_s + other.jvm_s,
            self.python_workers_s + other.python_workers_s,
            self.driver_s + other.driver_s,
        )


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds of the process and its reaped children)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    # utime, stime, cutime, cstime: fields 14-17 of proc(5), 11-14 after the name.
    ticks = sum(int(f) for f in fields[11:15])
    return int(fields[1]), ticks / _TICKS_PER_S


def _exe(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/exe").resolve().name
    except OSError:
        return ""


def cpu_split(root: int | None = None) -> CpuSplit:
    """CPU seconds so far of `root` (default: this process) and its descendants."""
    root = os.getpid() if root is None else root
    proc = Path("/proc")
    if not proc.is_dir():
        return CpuSplit()
    children: dict[int, list[int]] = defaultdict(list)
    cpu: dict[int, float] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        found = _stat(int(entry.name))
        if found is not None:
            children[found[0]].append(int(entry.name))
            cpu[int(entry.name)] = found[1]
    jvm = workers = 0.0
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        exe = _exe(pid)
        if exe == "tansu":  # the embedded broker: not the job's
            continue
        if exe == "java":
            # The JVM's cutime holds the Python workers it reaped: not the JVM's own.
            jvm += _own_s(pid)
            workers += cpu.get(pid, 0.0) - _own_s(pid)
        else:
            workers += cpu.get(pid, 0.0)
    return CpuSplit(jvm_s=jvm, python_workers_s=workers, driver_s=_own_s(root))


def _own_s(pid: int) -> float:
    """utime + stime only (not the reaped children's)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S


def jvm_thread_cpu(root: int | None = None) -> dict[str, float]:
    """CPU seconds so far of the JVM threads among `root`'s descendants, by thread name
    (digits and dashes at the end dropped: a pool's threads add up under one name)."""
    totals: dict[str, float] = defaultdict(float)
    root = os.getpid() if root is None else root
    for task in Path("/proc").glob("[0-9]*/task/[0-9]*/stat"):
        pid = int(task.parts[2])
        if pid == root or _exe(pid) != "java" or not _descends(pid, root):
            continue
        try:
            text = task.read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")].rstrip("-0123456789#")
        fields = text.rsplit(")", 1)[1].split()
        totals[name] += (int(fields[11]) + int(fields[12])) / _TICKS_PER_S
    return dict(totals)


def _descends(pid: int, root: int) -> bool:
    while pid > 1:
        found = _stat(pid)
        if found is None:
            return False
        pid = found[0]
        if pid == root:
            return True
    return False
