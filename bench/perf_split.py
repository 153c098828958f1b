"""Where a server's CPU went, from a ``perf record -g`` file (``hub_peers.py --perf PREFIX``):

    python bench/perf_split.py PREFIX.hub.10 [more files]

Each sample is put in one bucket by its stack: kernel time under a write system call (the
loopback TCP send, which also runs the receiving side's TCP processing), under epoll, under a
read, other kernel time; user time by the library its innermost frame is in (the CPython
interpreter runs our code and every pure-Python library, so it is one bucket here; ``py-spy
record --native`` splits it by Python function).
"""

from __future__ import annotations

import collections
import subprocess
import sys

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


def main() -> None:
    for path in sys.argv[1:]:
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
