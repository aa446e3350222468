"""A small pure-Python reader for GGUF headers.

llama.cpp is C code: handing it a file that is not GGUF, or a truncated one, may end the
process instead of raising. So every file is checked here first: the magic bytes, the
metadata (context length, chat template) and that the file is long enough for the tensors
its header declares. Only the header is read, never the weights.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import ModelError

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
# Sanity limits: a header that claims more than this is corrupt, not large.
_MAX_KV = 1_000_000
_MAX_TENSORS = 1_000_000
_MAX_DIMS = 8

# GGUF value types (gguf spec).
_SCALARS = {
    0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i",
    6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d",
}
_STRING, _ARRAY = 8, 9

# ggml tensor types: (elements per block, bytes per block). Used only to check that the file
# holds all the tensor data its header declares; an unknown type skips the exact check.
_BLOCKS = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24),
    8: (32, 34), 9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144),
    13: (256, 176), 14: (256, 210), 15: (256, 292), 16: (256, 66), 17: (256, 74),
    18: (256, 98), 19: (256, 50), 20: (32, 18), 21: (256, 110), 22: (256, 82),
    23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8),
    29: (256, 56), 30: (1, 2), 34: (256, 54), 35: (256, 66), 39: (32, 17),
}


class _Truncated(Exception):
    """Raised inside the reader when the file ends before the header does."""


@dataclass
class GGUFInfo:
    """What the appliance needs from a GGUF header."""

    path: Path
    version: int
    size: int
    metadata: dict[str, Any] = field(repr=False)
    tensor_count: int = 0
    data_end: int | None = None  # bytes the tensors need; None when a tensor type is unknown

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    @property
    def context_length(self) -> int | None:
        """The model's training context (``<arch>.context_length``), or None if absent."""
        value = self.metadata.get(f"{self.architecture}.context_length")
        return int(value) if isinstance(value, int) else None

    @property
    def chat_template(self) -> str | None:
        value = self.metadata.get("tokenizer.chat_template")
        return value if isinstance(value, str) and value.strip() else None

    @property
    def name(self) -> str:
        return str(self.metadata.get("general.name", ""))


class _Reader:
    """Sequential little-endian reads that turn a short read into _Truncated."""

    def __init__(self, fh: BinaryIO, size: int):
        self.fh = fh
        self.size = size

    def take(self, n: int) -> bytes:
        if n < 0 or self.fh.tell() + n > self.size:
            raise _Truncated()
        data = self.fh.read(n)
        if len(data) != n:
            raise _Truncated()
        return data

    def skip(self, n: int) -> None:
        if n < 0 or self.fh.tell() + n > self.size:
            raise _Truncated()
        self.fh.seek(n, 1)

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def u32(self) -> int:
        return self.unpack("<I")

    def u64(self) -> int:
        return self.unpack("<Q")


def read_gguf(path: str | Path, *, keep_arrays: bool = False) -> GGUFInfo:
    """Read and check a GGUF header; raise ModelError naming the file when it is not usable.

    Arrays in the metadata (the tokenizer's vocabulary, mostly) are skipped unless
    ``keep_arrays``: the appliance only needs scalars and strings.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            return _parse(fh, path, size, keep_arrays)
    except FileNotFoundError:
        raise ModelError(f"model file {path} does not exist",
                         hint="run `make models`, or `appliance models list` to see what is expected") from None
    except IsADirectoryError:
        raise ModelError(f"model path {path} is a folder, not a GGUF file") from None
    except _Truncated:
        raise ModelError(f"model file {path} is truncated (its GGUF header or tensor data ends early)",
                         hint="download it again, e.g. `make models`") from None
    except OSError as exc:
        raise ModelError(f"cannot read model file {path}: {exc.strerror}") from None


def _parse(fh: BinaryIO, path: Path, size: int, keep_arrays: bool) -> GGUFInfo:
    rd = _Reader(fh, size)
    magic = fh.read(4)
    if magic != MAGIC:
        if len(magic) < 4 and MAGIC.startswith(magic) and magic:
            raise _Truncated()
        raise ModelError(f"{path} is not a GGUF model file (it does not start with 'GGUF')",
                         hint="use a .gguf file made for llama.cpp")
    version = rd.u32()
    if version not in (1, 2, 3):
        raise ModelError(f"{path} has unsupported GGUF version {version}",
                         hint="convert it with a current llama.cpp, or use another file")
    count = rd.u32 if version == 1 else rd.u64
    n_tensors, n_kv = count(), count()
    if n_tensors > _MAX_TENSORS or n_kv > _MAX_KV:
        raise ModelError(f"{path} has a corrupt GGUF header (absurd counts)", hint="download it again")
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = _string(rd, version)
        metadata[key] = _value(rd, rd.u32(), version, keep_arrays)
    data_end = _tensor_extent(rd, version, n_tensors, metadata)
    if data_end is not None and data_end > size:
        raise _Truncated()
    return GGUFInfo(path=path, version=version, size=size, metadata=metadata,
                    tensor_count=n_tensors, data_end=data_end)


def _string(rd: _Reader, version: int) -> str:
    length = rd.u32() if version == 1 else rd.u64()
    return rd.take(length).decode("utf-8", errors="replace")


def _value(rd: _Reader, vtype: int, version: int, keep_arrays: bool) -> Any:
    if vtype in _SCALARS:
        return rd.unpack(_SCALARS[vtype])
    if vtype == _STRING:
        return _string(rd, version)
    if vtype == _ARRAY:
        item_type = rd.u32()
        n = rd.u32() if version == 1 else rd.u64()
        if not keep_arrays:
            _skip_array(rd, item_type, n, version)
            return None
        return [_value(rd, item_type, version, keep_arrays) for _ in range(n)]
    raise ModelError(f"{rd.fh.name} has a corrupt GGUF header (unknown value type {vtype})",
                     hint="download it again")


def _skip_array(rd: _Reader, item_type: int, n: int, version: int) -> None:
    if item_type in _SCALARS:
        rd.skip(struct.calcsize(_SCALARS[item_type]) * n)
    elif item_type == _STRING:
        _skip_strings(rd, n, version)
    else:
        for _ in range(n):
            _value(rd, item_type, version, keep_arrays=False)


# Bytes read at a time while skipping an array of strings.
_CHUNK = 1 << 20


def _skip_strings(rd: _Reader, n: int, version: int) -> None:
    """Skip ``n`` length-prefixed strings. A vocabulary holds 50k to 250k of them: a read and
    a seek each took seconds at every model load, so the lengths are walked in chunks held in
    memory and the file is positioned once, after the last string."""
    length = struct.Struct("<I" if version == 1 else "<Q")
    width = length.size
    fh = rd.fh
    base = fh.tell()  # the file offset of buf[0]
    buf, pos = b"", 0
    for _ in range(n):
        if pos + width > len(buf):
            base += pos
            if base + width > rd.size:
                raise _Truncated()
            fh.seek(base)
            buf, pos = fh.read(_CHUNK), 0
            if len(buf) < width:
                raise _Truncated()
        pos += width + length.unpack_from(buf, pos)[0]
    end = base + pos
    if end > rd.size:
        raise _Truncated()
    fh.seek(end)


def _tensor_extent(rd: _Reader, version: int, n_tensors: int, metadata: dict) -> int | None:
    """Bytes from the file start to the end of the last tensor's data, when computable.

    Reading the tensor table also proves that the header itself is complete.
    """
    last_end = 0
    exact = True
    for _ in range(n_tensors):
        _string(rd, version)
        n_dims = rd.u32()
        if n_dims > _MAX_DIMS:
            raise ModelError(f"{rd.fh.name} has a corrupt GGUF tensor table", hint="download it again")
        dims = [rd.u32() if version == 1 else rd.u64() for _ in range(n_dims)]
        ttype = rd.u32()
        offset = rd.u64()
        elements = 1
        for d in dims:
            elements *= d
        if ttype in _BLOCKS:
            per_block, block_bytes = _BLOCKS[ttype]
            last_end = max(last_end, offset + (elements + per_block - 1) // per_block * block_bytes)
        else:
            exact = False
            last_end = max(last_end, offset)
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0:
        alignment = DEFAULT_ALIGNMENT
    header_end = rd.fh.tell()
    data_start = (header_end + alignment - 1) // alignment * alignment
    end = data_start + last_end
    # With an unknown tensor type only the start of the last tensor is known: still a useful
    # lower bound, so check it, but report no exact extent.
    if not exact:
        if end > rd.size:
            raise _Truncated()
        return None
    return end
