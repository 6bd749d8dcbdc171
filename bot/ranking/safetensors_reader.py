"""A safetensors file read tensor by tensor into numpy arrays, never the whole file at once (the
`safetensors` package read all 87 MB beside the copies made from it: +268 MiB at load)."""

from __future__ import annotations

import json
import struct
from typing import Any

_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
           "I8": "i1", "U8": "u1", "BOOL": "?"}


def read_safetensors(stream: Any, digest: Any) -> dict[str, Any]:
    """The tensors of a safetensors file as numpy arrays, read one after another from `stream`
    (each into its own buffer: never the whole file at once), every byte also fed to `digest`.
    ValueError when the file is not one (or holds a type numpy has not, such as bfloat16)."""
    import numpy as np

    def exactly(size: int) -> bytearray:
        data = bytearray(size)
        view, done = memoryview(data), 0
        while done < size:  # a megabyte at a time: a zip member reads (and joins) what it is asked
            got = stream.readinto(view[done:done + (1 << 20)])
            if not got:
                raise ValueError("the weights file is cut short")
            done += got
        digest.update(data)
        return data

    (length,) = struct.unpack("<Q", exactly(8))
    header = json.loads(bytes(exactly(length)))
    header.pop("__metadata__", None)
    tensors: dict[str, Any] = {}
    position = 0
    for name, info in sorted(header.items(), key=lambda item: item[1]["data_offsets"][0]):
        start, end = info["data_offsets"]
        dtype = _DTYPES.get(info["dtype"])
        if dtype is None or start < position:
            raise ValueError(f"tensor {name}: {info['dtype']} at {start} cannot be read")
        exactly(start - position)
        tensors[name] = np.frombuffer(exactly(end - start), dtype=dtype).reshape(info["shape"])
        position = end
    while rest := stream.read(1 << 20):  # nothing, in a well-formed file: hashed all the same
        digest.update(rest)
    return tensors
