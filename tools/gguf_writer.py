"""Minimal GGUF v3 writer (numpy only) for libcosyvoice model and voice files.

Layout (little-endian): magic "GGUF", u32 version 3, u64 n_tensors, u64 n_kv; n_kv key/value
pairs (string key, u32 type, value); n_tensors tensor infos (string name, u32 n_dims, u64 ne[n_dims]
innermost first, u32 ggml type, u64 offset from the data section); padding to `alignment`; data.
Strings are u64 length + bytes (no terminator). See docs/model-format.md.
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


def _str(b):
    if isinstance(b, str):
        b = b.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


class Writer:
    def __init__(self):
        self.kv = []        # (key, type, payload bytes)
        self.tensors = []   # (name, shape (torch order), ggml type, bytes)

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
        else:
            raise ValueError("unsupported array element type")
        self.kv.append((key, T_ARRAY, b"".join(out)))

    # ---- tensors ----------------------------------------------------------------------------
    def add_tensor(self, name, array, ggml_type):
        """array: numpy array in PyTorch dimension order; stored row-major as is."""
        a = np.ascontiguousarray(array)
        if ggml_type == GGML_F32:
            data = a.astype("<f4").tobytes()
        elif ggml_type == GGML_F16:
            data = a.astype("<f2").tobytes()
        elif ggml_type == GGML_BF16:
            from ptread import f32_to_bf16_bits
            data = f32_to_bf16_bits(a.astype(np.float32)).astype("<u2").tobytes()
        elif ggml_type == GGML_I32:
            data = a.astype("<i4").tobytes()
        else:
            raise ValueError(f"unsupported tensor type {ggml_type}")
        if any(t[0] == name for t in self.tensors):
            raise ValueError(f"duplicate tensor {name}")
        self.tensors.append((name, tuple(a.shape), ggml_type, data))

    def write(self, path):
        head = [GGUF_MAGIC, struct.pack("<IQQ", GGUF_VERSION, len(self.tensors), len(self.kv) + 1)]
        head.append(_str("general.alignment") + struct.pack("<I", T_UINT32) +
                    struct.pack("<I", ALIGNMENT))
        for key, t, payload in self.kv:
            head.append(_str(key) + struct.pack("<I", t) + payload)
        offset = 0
        offsets = []
        for name, shape, t, data in self.tensors:
            offsets.append(offset)
            ne = list(reversed(shape)) if shape else [1]
            head.append(_str(name) + struct.pack("<I", len(ne)) +
                        struct.pack(f"<{len(ne)}Q", *ne) + struct.pack("<IQ", t, offset))
            offset += (len(data) + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
        header = b"".join(head)
        pad = (-len(header)) % ALIGNMENT
        with open(path, "wb") as fh:
            fh.write(header)
            fh.write(b"\0" * pad)
            for (name, shape, t, data), off in zip(self.tensors, offsets):
                fh.write(data)
                fh.write(b"\0" * ((-len(data)) % ALIGNMENT))
