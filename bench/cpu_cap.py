"""A CPU quota for a process and its children, in a cgroup of its own (v1 `cpu` + `cpuacct`, or v2).

`CpuCap.create("name", 0.25)` makes the cgroup (cgroup v1: a directory under the `cpu` hierarchy with
`cpu.cfs_quota_us` a quarter of `cpu.cfs_period_us`, and one under `cpuacct` to count; v2: one with
`cpu.max`), `add(pid)` moves a process in (its children follow), `usage()` is the CPU-seconds the
group has used (`cpuacct.usage`, or `cpu.stat`'s `usage_usec`), and `remove()` moves whatever is
left back out and deletes the directories. Where no cgroup can be made (not root, no cpu
controller, a read-only mount) `create` raises `CgroupUnavailable` saying why, and leaves nothing.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000


class CgroupUnavailable(Exception):
    """No CPU-capped cgroup can be made here; the message says why."""


@dataclass
class CpuCap:
    """One cgroup (a directory per hierarchy it lives in) holding processes to a share of a core."""

    share: float
    dirs: list[Path]  # where a pid is written: the quota's directory, and cpuacct's on v1
    usage_file: Path
    v2: bool
    made: list[Path] = field(default_factory=list)

    @classmethod
    def create(cls, name: str, share: float, root: Path = ROOT) -> CpuCap:
        if not 0 < share <= (os.cpu_count() or 1):
            raise CgroupUnavailable(f"a CPU share of {share:g} cores makes no sense here")
        quota = max(1000, round(share * PERIOD_US))
        cap: CpuCap | None = None
        try:
            if (root / "cpu" / "cpu.cfs_quota_us").exists():
                cap = cls._v1(name, share, root)
                (cap.dirs[0] / "cpu.cfs_period_us").write_text(f"{PERIOD_US}\n")
                (cap.dirs[0] / "cpu.cfs_quota_us").write_text(f"{quota}\n")
            elif "cpu" in _read(root / "cgroup.controllers").split():
                cap = cls._v2(name, share, root)
                (cap.dirs[0] / "cpu.max").write_text(f"{quota} {PERIOD_US}\n")
            else:
                raise CgroupUnavailable(f"no cgroup cpu controller under {root}")
        except OSError as exc:
            if cap is not None:
                cap.remove()
            raise CgroupUnavailable(f"cannot make a CPU-capped cgroup under {root}: {exc}") from exc
        return cap

    @classmethod
    def _v1(cls, name: str, share: float, root: Path) -> CpuCap:
        cpu, acct = root / "cpu", root / "cpuacct"
        same = acct.exists() and acct.resolve() == cpu.resolve()
        cap = cls(share, [], Path(), v2=False)
        for base in [cpu] if same or not acct.exists() else [cpu, acct]:
            cap._make(base / name)
        cap.usage_file = cap.dirs[-1] / "cpuacct.usage"
        if not (cap.dirs[0] / "cpu.cfs_quota_us").exists() or not cap.usage_file.exists():
            # A kernel fills a new cgroup with its files; a plain directory stays empty.
            cap.remove()
            raise CgroupUnavailable(f"{root / 'cpu'} is not a cgroup hierarchy")
        return cap

    @classmethod
    def _v2(cls, name: str, share: float, root: Path) -> CpuCap:
        if "cpu" not in _read(root / "cgroup.subtree_control").split():
            (root / "cgroup.subtree_control").write_text("+cpu\n")
        cap = cls(share, [], Path(), v2=True)
        cap._make(root / name)
        cap.usage_file = cap.dirs[0] / "cpu.stat"
        if not (cap.dirs[0] / "cpu.max").exists():
            cap.remove()
            raise CgroupUnavailable(f"{root} is not a cgroup v2 hierarchy with the cpu controller")
        return cap

    def _make(self, path: Path) -> None:
        path.mkdir()
        self.made.append(path)
        self.dirs.append(path)

    def add(self, pid: int) -> None:
        for d in self.dirs:
            (d / "cgroup.procs").write_text(f"{pid}\n")

    def usage(self) -> float:
        """CPU-seconds the group's processes have used so far (the dead ones' included)."""
        text = _read(self.usage_file)
        if not self.v2:
            return int(text) / 1e9
        fields = dict(line.split() for line in text.splitlines() if line.strip())
        return int(fields["usage_usec"]) / 1e6

    def remove(self) -> None:
        """Move any process still in the group to the parent, then delete the directories."""
        for d in reversed(self.made):
            for _ in range(50):
                with contextlib.suppress(OSError):
                    for pid in _read(d / "cgroup.procs").split():
                        (d.parent / "cgroup.procs").write_text(f"{pid}\n")
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)  # a process just exiting still counts for a moment
        self.made.clear()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
