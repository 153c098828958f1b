"""Where a server's CPU went, from a ``perf record -g`` file (``bench/hub/peers.py --perf PREFIX``):

    python -m bench.hub.perf_split PREFIX.hub.10 [more files]
    python -m bench.hub.perf_split --smoke     # records a short Python loop first, then splits it

Each sample is put in one bucket by its stack: kernel time under a write system call (the
loopback TCP send, which also runs the receiving side's TCP processing), under epoll, under a
read, other kernel time; user time by the library its innermost frame is in (the CPython
interpreter runs our code and every pure-Python library, so it is one bucket here; ``py-spy
record --native`` splits it by Python function).
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
from pathlib import Path

WRITE = (
    "vfs_write",
    "do_writev",
    "ksys_write",
    "tcp_sendmsg",
    "sock_write_iter",
    "sendto",
    "__GI___writev",
    "__libc_write",
)
READ = ("vfs_read", "ksys_read", "tcp_recvmsg", "sock_read_iter", "recvfrom")
USER = (
    ("libpython", "user: CPython interpreter (our code, uvicorn, Starlette, the stdlib)"),
    ("uvloop", "user: uvloop"),
    ("loop.cpython", "user: uvloop"),
    ("asyncpg", "user: asyncpg (the membership barrier)"),
    ("protocol.cpython", "user: asyncpg (the membership barrier)"),
    ("pgproto", "user: asyncpg (the membership barrier)"),
    ("record.cpython", "user: asyncpg (the membership barrier)"),
    ("orjson", "user: orjson"),
    ("libc", "user: libc"),
    ("node", "user: node"),
)


def samples(path: str) -> list[list[str]]:
    script = subprocess.run(
        ["perf", "script", "-i", path], capture_output=True, text=True, check=True
    ).stdout
    found, current = [], []
    for line in script.splitlines():
        if not line.strip():
            if current:
                found.append(current)
            current = []
        elif line[0] in " \t":
            current.append(line.strip())
        else:
            if current:
                found.append(current)
            current = [line]
    if current:
        found.append(current)
    return found


def bucket(sample: list[str]) -> str:
    frames = sample[1:]
    leaf = frames[0] if frames else ""
    if "[kernel.kallsyms]" in leaf:
        stack = " ".join(frames)
        if any(name in stack for name in WRITE):
            return "kernel: write/writev (loopback TCP send)"
        if "ep_poll" in stack or "epoll" in stack:
            return "kernel: epoll"
        if any(name in stack for name in READ):
            return "kernel: read/recv"
        return "kernel: other (scheduler, interrupts, other system calls)"
    for mark, name in USER:
        if mark in leaf:
            return name
    return "user: other"


def record_smoke(folder: str) -> str:
    """A second of a busy Python loop under ``perf record -g``: a file to split in CI."""
    path = str(Path(folder) / "smoke.perf")
    loop = "import time\nend = time.time() + 1\nwhile time.time() < end: sum(range(1000))"
    subprocess.run(
        ["perf", "record", "-q", "-g", "-o", path, "--", sys.executable, "-c", loop],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", help="perf record files")
    parser.add_argument("--smoke", action="store_true", help="record a short loop and split it")
    args = parser.parse_args()
    if not args.paths and not args.smoke:
        parser.error("give perf record files, or --smoke")
    with tempfile.TemporaryDirectory() as folder:
        paths = [*args.paths, *([record_smoke(folder)] if args.smoke else [])]
        for path in paths:
            split(path)


def split(path: str) -> None:
    found = samples(path)
    counts = collections.Counter(bucket(sample) for sample in found)
    total = len(found) or 1
    print(f"{path}: {len(found)} samples")
    for name, count in counts.most_common():
        print(f"  {100 * count / total:5.1f}%  {name}")
    kernel = sum(c for name, c in counts.items() if name.startswith("kernel"))
    print(f"  kernel {100 * kernel / total:.1f}%, user {100 * (total - kernel) / total:.1f}%")


if __name__ == "__main__":
    main()
