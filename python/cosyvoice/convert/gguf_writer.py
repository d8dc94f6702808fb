"""Minimal GGUF v3 writer (numpy only) for libcosyvoice model and voice files.

Layout (little-endian): magic "GGUF", u32 version 3, u64 n_tensors, u64 n_kv; n_kv key/value
pairs (string key, u32 type, value); n_tensors tensor infos (string name, u32 n_dims, u64 ne[n_dims]
innermost first, u32 ggml type, u64 offset from the data section); padding to `alignment`; data.
Strings are u64 length + bytes (no terminator). See docs/model-format.md.

Tensors are converted to their storage type only while the file is written, in blocks of about
1M elements, so the writer holds no second copy of the weights. A tensor may also be given as a
Lazy(shape, fn): fn() is called at write time and returns the array, or an iterable of blocks of
it split along dimension 0 (in order); tools/make_model.py writes a 1.7 GB model this way without
ever holding more than one block of it.
"""
import struct

import numpy as np

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32

# value types
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY, \
    T_UINT64, T_INT64, T_FLOAT64 = range(13)
# ggml tensor types used here
GGML_F32, GGML_F16, GGML_I32, GGML_BF16 = 0, 1, 26, 30
GGML_NAMES = {GGML_F32: "f32", GGML_F16: "f16", GGML_I32: "i32", GGML_BF16: "bf16"}
GGML_SIZES = {GGML_F32: 4, GGML_F16: 2, GGML_I32: 4, GGML_BF16: 2}
_BLOCK = 1 << 20   # elements converted at a time


class Lazy:
    """A tensor produced at write time. shape: PyTorch order. fn(): the whole array, or an
    iterable of consecutive blocks along dimension 0 (each block's shape[1:] == shape[1:])."""

    def __init__(self, shape, fn):
        self.shape = tuple(int(d) for d in shape)
        self.fn = fn

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        n = 1
        for d in self.shape:
            n *= d
        return n


def _encode(a, ggml_type):
    """numpy array -> little-endian bytes of ggml_type."""
    if ggml_type == GGML_F32:
        return a.astype("<f4", copy=False).tobytes()
    if ggml_type == GGML_F16:
        return a.astype("<f2").tobytes()
    if ggml_type == GGML_BF16:
        from .ptread import f32_to_bf16_bits
        return f32_to_bf16_bits(a.astype(np.float32, copy=False)).astype("<u2", copy=False).tobytes()
    if ggml_type == GGML_I32:
        return a.astype("<i4", copy=False).tobytes()
    raise ValueError(f"unsupported tensor type {ggml_type}")


def _str(b):
    if isinstance(b, str):
        b = b.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


class Writer:
    def __init__(self):
        self.kv = []        # (key, type, payload bytes)
        self.tensors = []   # (name, shape (torch order), ggml type, numpy array or Lazy)

    # ---- key/values -------------------------------------------------------------------------
    def add_u32(self, key, v):
        self.kv.append((key, T_UINT32, struct.pack("<I", int(v))))

    def add_i32(self, key, v):
        self.kv.append((key, T_INT32, struct.pack("<i", int(v))))

    def add_f32(self, key, v):
        self.kv.append((key, T_FLOAT32, struct.pack("<f", float(v))))

    def add_string(self, key, v):
        self.kv.append((key, T_STRING, _str(v)))

    def add_array(self, key, elem_type, values):
        out = [struct.pack("<IQ", elem_type, len(values))]
        if elem_type == T_STRING:
            out.extend(_str(v) for v in values)
        elif elem_type == T_INT32:
            out.append(np.asarray(values, dtype="<i4").tobytes())
        elif elem_type == T_UINT32:
            out.append(np.asarray(values, dtype="<u4").tobytes())
        elif elem_type == T_FLOAT32:
            out.append(np.asarray(values, dtype="<f4").tobytes())
        elif elem_type == T_UINT8:
            out.append(bytes(values))
        else:
            raise ValueError("unsupported array element type")
        self.kv.append((key, T_ARRAY, b"".join(out)))

    # ---- tensors ----------------------------------------------------------------------------
    def add_tensor(self, name, array, ggml_type):
        """array: numpy array (or Lazy) in PyTorch dimension order; stored row-major as is."""
        if ggml_type not in GGML_SIZES:
            raise ValueError(f"unsupported tensor type {ggml_type}")
        if any(t[0] == name for t in self.tensors):
            raise ValueError(f"duplicate tensor {name}")
        a = array if isinstance(array, Lazy) else np.asarray(array)
        self.tensors.append((name, tuple(int(d) for d in a.shape), ggml_type, a))

    @staticmethod
    def _nbytes(shape, t):
        n = 1
        for d in shape:
            n *= d
        return n * GGML_SIZES[t]

    def write(self, path):
        head = [GGUF_MAGIC, struct.pack("<IQQ", GGUF_VERSION, len(self.tensors), len(self.kv) + 1)]
        head.append(_str("general.alignment") + struct.pack("<I", T_UINT32) +
                    struct.pack("<I", ALIGNMENT))
        for key, t, payload in self.kv:
            head.append(_str(key) + struct.pack("<I", t) + payload)
        offset = 0
        for name, shape, t, _ in self.tensors:
            ne = list(reversed(shape)) if shape else [1]
            head.append(_str(name) + struct.pack("<I", len(ne)) +
                        struct.pack(f"<{len(ne)}Q", *ne) + struct.pack("<IQ", t, offset))
            offset += (self._nbytes(shape, t) + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
        header = b"".join(head)
        pad = (-len(header)) % ALIGNMENT
        with open(path, "wb") as fh:
            fh.write(header)
            fh.write(b"\0" * pad)
            for name, shape, t, a in self.tensors:
                want = self._nbytes(shape, t)
                got = 0
                for block in self._blocks(name, shape, a):
                    flat = block.reshape(-1)
                    for i in range(0, flat.size, _BLOCK):
                        data = _encode(flat[i:i + _BLOCK], t)
                        fh.write(data)
                        got += len(data)
                if got != want:
                    raise ValueError(f"tensor {name}: produced {got} bytes, expected {want}")
                fh.write(b"\0" * ((-want) % ALIGNMENT))

    @staticmethod
    def _blocks(name, shape, a):
        """Yield C-contiguous blocks of a tensor's data, checking each block's trailing shape."""
        if not isinstance(a, Lazy):
            yield np.ascontiguousarray(a)
            return
        out = a.fn()
        if isinstance(out, np.ndarray):
            out = (out,)
        for block in out:
            block = np.ascontiguousarray(block)
            if tuple(block.shape[1:]) != tuple(shape[1:]) and block.size:
                raise ValueError(f"tensor {name}: block of shape {block.shape} for {shape}")
            yield block
