"""The multi-instance bench's CPU cap (bench/cpu_cap.py) where no cgroup can be made: it says why and
leaves nothing behind, so `--cpu-cap` is skipped with one line instead of failing or littering."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.cpu_cap import CgroupUnavailable, CpuCap


def test_a_folder_without_cgroup_controllers_is_refused(tmp_path: Path) -> None:
    """No cpu controller under the root: refused, and no directory made."""
    with pytest.raises(CgroupUnavailable, match="no cgroup cpu controller"):
        CpuCap.create("bench-d1", 0.25, root=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_plain_folder_shaped_like_cgroup_v1_is_refused_and_cleaned_up(tmp_path: Path) -> None:
    """A v1-looking layout that is only plain folders: the kernel would have filled the new cgroup
    with its files, so it is not a cgroup; the folders made for it are removed again."""
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    (tmp_path / "cpuacct").mkdir()
    with pytest.raises(CgroupUnavailable, match="not a cgroup hierarchy"):
        CpuCap.create("bench-d1", 0.25, root=tmp_path)
    assert sorted(p.name for p in (tmp_path / "cpu").iterdir()) == ["cpu.cfs_quota_us"]
    assert list((tmp_path / "cpuacct").iterdir()) == []


def test_a_share_beyond_the_machine_is_refused(tmp_path: Path) -> None:
    """A quota of more cores than there are, or none, is a mistake, not a cap."""
    for share in (0.0, 1000.0):
        with pytest.raises(CgroupUnavailable, match="makes no sense"):
            CpuCap.create("bench-d1", share, root=tmp_path)
