"""Reading a GGUF file (llama.cpp's one-file model format) with nothing but the standard library,
numpy and torch: the metadata, the tensor table, and the 4-bit and 8-bit blocks (built in notebook
13, section 1).

A GGUF file is three parts, all little-endian:

    header      b"GGUF", version (u32), tensor count (u64), metadata count (u64)
    metadata    key (string), value type (u32), value; a string is a u64 length then UTF-8 bytes,
                an array is an element type (u32), a count (u64), then the elements
    tensors     per tensor: name, number of dims (u32), dims (u64 each, fastest-moving first),
                ggml type (u32), offset (u64) from the start of the data section, which begins at
                the next multiple of ``general.alignment`` (default 32) after the table

A quantized tensor is stored in blocks of 32 numbers along its rows. SmolLM2's file uses two kinds:

- ``Q8_0`` (34 bytes a block): a float16 scale ``d``, then 32 signed bytes ``q``; value = ``d * q``.
- ``Q4_1`` (20 bytes a block): a float16 scale ``d``, a float16 minimum ``m``, then 16 bytes that hold
  32 four-bit numbers ``q`` in 0..15; value = ``d * q + m``. The low nibble of byte ``j`` is number
  ``j``, the high nibble number ``j + 16``. See :func:`dequantize_q4_1` for one block written out.

The attention's query and key rows are stored permuted (llama.cpp's converter does it so that its
rotation of adjacent pairs reproduces Hugging Face's rotation of halves); :func:`unpermute_rope_rows`
undoes it. Reading the metadata here takes a fraction of a second; ``gguf.GGUFReader`` (the
reference in the tests) turns each of the 49,152 vocabulary strings into its own numpy field.
"""
from __future__ import annotations

import hashlib
import mmap
import struct
from dataclasses import dataclass
from math import prod
from pathlib import Path

import numpy as np
import torch

GGML_TYPES = {0: "F32", 1: "F16", 3: "Q4_1", 8: "Q8_0"}  # the ggml type ids this reader understands
BLOCKS = {"Q4_1": (32, 20), "Q8_0": (32, 34)}  # type -> (numbers per block, bytes per block)
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_NUMPY = {"B": np.uint8, "b": np.int8, "H": np.uint16, "h": np.int16, "I": np.uint32, "i": np.int32,
          "f": np.float32, "?": np.bool_, "Q": np.uint64, "q": np.int64, "d": np.float64}
_STRING, _ARRAY = 8, 9
_U64 = struct.Struct("<Q")


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of the file: ``shape`` in torch order (rows, columns), where its bytes are, how stored."""

    name: str
    shape: tuple[int, ...]
    ggml_type: str  # "F32", "F16", "Q4_1" or "Q8_0"
    offset: int  # absolute byte offset in the file
    nbytes: int

    @property
    def numel(self) -> int:
        return prod(self.shape)


class _Cursor:
    """Reads little-endian values one after another from a buffer."""

    def __init__(self, buf, pos: int = 0):
        self.buf, self.pos = buf, pos

    def scalar(self, code: str):
        (value,) = struct.unpack_from("<" + code, self.buf, self.pos)
        self.pos += struct.calcsize(code)
        return value

    def string(self) -> str:
        n = self.scalar("Q")
        text = self.buf[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return text

    def value(self, kind: int):
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind != _ARRAY:
            raise ValueError(f"unknown GGUF value type {kind} at byte {self.pos}; expected one of "
                             f"{sorted([*_SCALARS, _STRING, _ARRAY])}")
        element, count = self.scalar("I"), self.scalar("Q")
        if element in _SCALARS:  # a block of numbers: read them all at once
            dtype = np.dtype(_NUMPY[_SCALARS[element]]).newbyteorder("<")
            values = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.pos)
            self.pos += values.nbytes
            return values.tolist()
        if element == _STRING:  # a vocabulary or a merge list: tens of thousands of strings, so a tight loop
            buf, pos, strings = self.buf, self.pos, []
            for _ in range(count):
                (n,) = _U64.unpack_from(buf, pos)
                strings.append(buf[pos + 8:pos + 8 + n].decode("utf-8"))
                pos += 8 + n
            self.pos = pos
            return strings
        return [self.value(element) for _ in range(count)]


class GGUFFile:
    """A GGUF file opened for reading: ``metadata`` (dict), ``tensors`` (name -> :class:`TensorInfo`).

    ``raw(name)`` gives a tensor's stored bytes, ``tensor(name)`` its float32 values in torch order.
    The file is memory-mapped: a tensor's bytes are read from disk only when asked for.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        with open(self.path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if self._map[:4] != b"GGUF":
            raise ValueError(f"{self.path} starts with {self._map[:4]!r}, not b'GGUF': it is not a GGUF file")
        cur = _Cursor(self._map, 4)
        self.version = cur.scalar("I")
        if self.version not in (2, 3):
            raise ValueError(f"{self.path} is GGUF version {self.version}; this reader handles versions 2 and 3")
        n_tensors, n_meta = cur.scalar("Q"), cur.scalar("Q")
        self.metadata: dict[str, object] = {}
        for _ in range(n_meta):
            key = cur.string()
            self.metadata[key] = cur.value(cur.scalar("I"))
        table = []
        for _ in range(n_tensors):
            name, ndim = cur.string(), cur.scalar("I")
            dims = [cur.scalar("Q") for _ in range(ndim)]  # fastest-moving first (columns, then rows)
            kind, offset = cur.scalar("I"), cur.scalar("Q")
            if kind not in GGML_TYPES:
                raise ValueError(f"tensor {name!r} has ggml type {kind}; this reader knows {GGML_TYPES}")
            table.append((name, tuple(reversed(dims)), GGML_TYPES[kind], offset))
        align = int(self.metadata.get("general.alignment", 32))
        self.data_offset = -(-cur.pos // align) * align  # the data section starts at the next multiple of align
        self.tensors = {name: TensorInfo(name, shape, kind, self.data_offset + offset, _nbytes(kind, shape))
                        for name, shape, kind, offset in table}

    def raw(self, name: str) -> np.ndarray:
        """The stored bytes of tensor ``name``: uint8 ``(rows, bytes per row)`` for a quantized tensor,
        float32/float16 of the tensor's shape otherwise. A read-only view of the file."""
        info = self._info(name)
        if info.ggml_type in BLOCKS:
            return np.frombuffer(self._map, np.uint8, info.nbytes, info.offset).reshape(
                *info.shape[:-1], info.nbytes // prod(info.shape[:-1]))  # (rows, blocks per row * block bytes)
        dtype = np.float32 if info.ggml_type == "F32" else np.float16
        return np.frombuffer(self._map, dtype, info.numel, info.offset).reshape(info.shape)

    def tensor(self, name: str) -> torch.Tensor:
        """Tensor ``name`` as float32, shape ``info.shape`` (dequantized if stored in blocks)."""
        info = self._info(name)
        data = torch.from_numpy(self.raw(name).copy())
        if info.ggml_type not in BLOCKS:
            return data.float()
        return dequantize(data, info.ggml_type).reshape(info.shape)

    def _info(self, name: str) -> TensorInfo:
        if name not in self.tensors:
            raise KeyError(f"{self.path.name} has no tensor {name!r}; it has {len(self.tensors)} tensors, "
                           f"e.g. {list(self.tensors)[:4]}")
        return self.tensors[name]

    def close(self) -> None:
        self._map.close()

    def __enter__(self) -> "GGUFFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"GGUFFile({self.path.name!r}, version={self.version}, {len(self.metadata)} keys, {len(self.tensors)} tensors)"


def _nbytes(kind: str, shape: tuple[int, ...]) -> int:
    if kind in BLOCKS:
        per_block, block_bytes = BLOCKS[kind]
        if shape[-1] % per_block:
            raise ValueError(f"a {kind} tensor's rows must hold whole blocks of {per_block}, got shape {shape}")
        return prod(shape) // per_block * block_bytes
    return prod(shape) * (4 if kind == "F32" else 2)


def _half(blocks: torch.Tensor, start: int) -> torch.Tensor:
    """The float16 stored in bytes ``start, start+1`` of each block, as float32 ``(n_blocks, 1)``."""
    return blocks[:, start:start + 2].contiguous().view(torch.float16).float()


def dequantize_q8_0(blocks: torch.Tensor) -> torch.Tensor:
    """uint8 ``(n_blocks, 34)`` -> float32 ``(n_blocks, 32)``: value = scale * signed byte.

    Bytes 0-1 hold the float16 scale ``d``, bytes 2-33 the 32 numbers as int8 (-128..127).
    """
    q = blocks[:, 2:34].contiguous().view(torch.int8).float()  # (n_blocks, 32)
    return _half(blocks, 0) * q


def dequantize_q4_1(blocks: torch.Tensor) -> torch.Tensor:
    """uint8 ``(n_blocks, 20)`` -> float32 ``(n_blocks, 32)``: value = scale * nibble + minimum.

    Bytes 0-1: float16 scale ``d``; bytes 2-3: float16 minimum ``m``; bytes 4-19: 16 bytes whose low
    nibbles are numbers 0-15 and high nibbles numbers 16-31. One block written out, a block whose
    32 numbers were -0.5, -0.45, ..., 1.05 (steps of 0.05): the quantizer picks ``m = -0.5`` (the
    smallest) and ``d = (1.05 - -0.5) / 15 = 0.10333`` (16 levels span the range), stored as
    float16 ``d = 0.10333``, ``m = -0.5``; number ``i`` becomes ``q = round((x - m) / d)``, so

        x: -0.50 -0.45 -0.40 -0.35 ... 0.25  0.30 ...  1.05
        q:   0     0     1     1   ...   7     8   ...   15
        byte 0 = q0 | q16 << 4 = 0 | 8 << 4 = 0x80 ("x_16 = 0.30 -> 8")

    and dequantizing gives back ``d * q + m``: -0.5, -0.5, -0.397, -0.397, ..., 1.04999, each within
    ``d / 2 = 0.052`` of the original. 20 bytes hold 32 numbers: 5 bits a number instead of 32.
    """
    d, m = _half(blocks, 0), _half(blocks, 2)  # (n_blocks, 1) each
    packed = blocks[:, 4:20]  # (n_blocks, 16)
    q = torch.cat([packed & 0x0F, packed >> 4], dim=1).float()  # (n_blocks, 32): low nibbles, then high
    return d * q + m


_DEQUANTIZE = {"Q4_1": dequantize_q4_1, "Q8_0": dequantize_q8_0}


def dequantize(data: torch.Tensor, ggml_type: str) -> torch.Tensor:
    """Stored bytes (uint8, any shape, whole blocks) of a ``Q4_1`` or ``Q8_0`` tensor -> float32 values, flat."""
    if ggml_type not in BLOCKS:
        raise ValueError(f"ggml_type must be one of {sorted(BLOCKS)}, got {ggml_type!r}")
    if data.dtype != torch.uint8:
        raise ValueError(f"data must be the stored bytes (torch.uint8), got dtype {data.dtype}")
    block_bytes = BLOCKS[ggml_type][1]
    if data.numel() % block_bytes:
        raise ValueError(f"{ggml_type} data must be whole blocks of {block_bytes} bytes, got {data.numel()} bytes")
    return _DEQUANTIZE[ggml_type](data.reshape(-1, block_bytes)).reshape(-1)  # (n_blocks * 32,)


def permute_rope_rows(w: torch.Tensor, num_heads: int) -> torch.Tensor:
    """What llama.cpp's converter does to a query or key weight ``(num_heads * head_dim, d_in)``.

    Within each head, Hugging Face's rows ``0..head_dim-1`` are reordered to
    ``0, half, 1, half + 1, ...`` (half = head_dim / 2), so that the pair rotated together,
    ``(i, i + half)`` in the "rotate halves" layout, becomes the adjacent pair ``(2i, 2i + 1)``.
    """
    rows, head_dim = w.shape[0], _head_dim(w, num_heads)
    split = w.reshape(num_heads, 2, head_dim // 2, *w.shape[1:])  # (heads, halves, half, ...)
    return split.transpose(1, 2).reshape(rows, *w.shape[1:])  # rows of a head: 0, half, 1, half + 1, ...


def unpermute_rope_rows(w: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Undo :func:`permute_rope_rows`: a GGUF query/key weight ``(num_heads * head_dim, d_in)`` in the
    order Hugging Face's checkpoint had, which rotates halves (``RotaryEmbedding(interleaved=False)``).

    Skipping it raises no error: the shapes are the same, only the logits are wrong.
    Pass ``num_heads`` = the number of key/value heads for the key weight (3 in SmolLM2), 9 for the query.
    """
    rows, head_dim = w.shape[0], _head_dim(w, num_heads)
    pairs = w.reshape(num_heads, head_dim // 2, 2, *w.shape[1:])  # (heads, half, 2, ...): adjacent pairs
    return pairs.transpose(1, 2).reshape(rows, *w.shape[1:])  # each head: even rows, then odd rows


def _head_dim(w: torch.Tensor, num_heads: int) -> int:
    if not isinstance(num_heads, int) or num_heads < 1 or w.dim() < 1 or w.shape[0] % (2 * num_heads):
        raise ValueError(f"the rows of w must split into {num_heads} heads of an even size, got shape "
                         f"{tuple(w.shape)} and num_heads={num_heads!r}")
    return w.shape[0] // num_heads


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file, read 1 MiB at a time, as 64 hex digits."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
