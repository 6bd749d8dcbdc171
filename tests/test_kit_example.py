"""The example of docs/development.md's test kit section runs as written."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[1] / "docs" / "development.md"
HEADING = "## Testing your channel or provider with the stand-ins"


def example() -> str:
    """The first Python block under the test kit's heading."""
    section = DOC.read_text(encoding="utf-8").split(HEADING, 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None, f"no python block under {HEADING!r} in {DOC}"
    return match.group(1)


async def test_the_documented_stand_in_example_passes() -> None:
    """Each test function the example defines passes against the stand-in."""
    namespace: dict[str, Any] = {}
    exec(compile(example(), str(DOC), "exec"), namespace)
    tests = [value for name, value in namespace.items() if name.startswith("test_")]
    assert tests, "the example defines no test"
    for test in tests:
        await test()
