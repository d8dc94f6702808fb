"""Read a PyTorch `torch.save` checkpoint (zip + pickle) with numpy only - no torch needed.

A `.pt` file written by torch >= 1.6 is a zip archive:
    <root>/data.pkl       pickled object graph (here: a state_dict, an OrderedDict name -> tensor)
    <root>/data/<key>     raw little-endian bytes of each storage
Tensors are pickled as `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)` where
`storage` is a persistent id ('storage', <StorageType>, key, location, numel). We map those calls
to numpy views over the storage bytes. Only what state_dicts use is supported; anything else
raises ValueError naming the unsupported piece.
"""
import collections
import pickle
import zipfile

import numpy as np

_STORAGE_DTYPES = {
    "FloatStorage": np.float32,
    "DoubleStorage": np.float64,
    "HalfStorage": np.float16,
    "BFloat16Storage": "bf16",
    "LongStorage": np.int64,
    "IntStorage": np.int32,
    "ShortStorage": np.int16,
    "CharStorage": np.int8,
    "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}


def bf16_to_f32(u16):
    """uint16 bf16 bit patterns -> float32 (exact)."""
    return (np.asarray(u16, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x):
    """float32 -> bf16 bit patterns, round to nearest even (NaN stays NaN)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        rounded[nan] = 0x7FC0
    return rounded


class _StorageType:
    def __init__(self, name):
        self.name = name


class Tensor:
    """A checkpoint tensor: `.array` is a numpy array (float32 for bf16 storages); `.dtype_name`
    is the torch dtype name it had in the file ("float32", "bfloat16", ...)."""

    def __init__(self, array, dtype_name):
        self.array = array
        self.dtype_name = dtype_name

    @property
    def shape(self):
        return tuple(self.array.shape)


def load(path):
    """Return an OrderedDict name -> Tensor for the state_dict stored in `path`."""
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ValueError(f"{path}: not a torch zip checkpoint ({exc})") from None
    names = zf.namelist()
    pkls = [n for n in names if n.endswith("/data.pkl") or n == "data.pkl"]
    if len(pkls) != 1:
        raise ValueError(f"{path}: expected one data.pkl in the archive, found {len(pkls)}")
    root = pkls[0][: -len("data.pkl")]
    storages = {}

    def storage_bytes(key, dtype, numel):
        if key not in storages:
            raw = zf.read(f"{root}data/{key}")
            if dtype == "bf16":
                arr = np.frombuffer(raw, dtype=np.uint16)
            else:
                arr = np.frombuffer(raw, dtype=dtype)
            if arr.size < numel:
                raise ValueError(f"{path}: storage {key} holds {arr.size} elements, expected {numel}")
            storages[key] = arr
        return storages[key]

    def rebuild_tensor(storage, offset, size, stride, *rest):
        arr, dtype_name = storage
        size = tuple(int(s) for s in size)
        stride = tuple(int(s) for s in stride)
        n = 1
        for s in size:
            n *= s
        if n == 0:
            view = np.zeros(size, dtype=arr.dtype)
        else:
            item = arr.itemsize
            view = np.lib.stride_tricks.as_strided(
                arr[offset:], shape=size, strides=tuple(s * item for s in stride))
            view = np.array(view)  # own, contiguous copy
        if dtype_name == "bfloat16":
            view = bf16_to_f32(view).reshape(size)
        return Tensor(view, dtype_name)

    def rebuild_parameter(data, requires_grad, backward_hooks, *rest):
        return data

    class Unpickler(pickle.Unpickler):
        def find_class(self, module, name):
            if module == "collections" and name == "OrderedDict":
                return collections.OrderedDict
            if module == "torch._utils" and name == "_rebuild_tensor_v2":
                return rebuild_tensor
            if module == "torch._utils" and name == "_rebuild_parameter":
                return rebuild_parameter
            if module == "torch" and name in _STORAGE_DTYPES:
                return _StorageType(name)
            if module == "torch" and name == "Size":
                return tuple
            raise ValueError(f"{path}: unsupported pickled object {module}.{name}")

        def persistent_load(self, pid):
            if not (isinstance(pid, tuple) and pid and pid[0] == "storage"):
                raise ValueError(f"{path}: unsupported persistent id {pid!r}")
            _, stype, key, _location, numel = pid
            if isinstance(stype, _StorageType):
                sname = stype.name
            else:
                raise ValueError(f"{path}: unsupported storage type {stype!r}")
            dtype = _STORAGE_DTYPES[sname]
            arr = storage_bytes(str(key), dtype, int(numel))
            dtype_name = {
                "FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16",
                "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
                "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8",
                "BoolStorage": "bool"}[sname]
            return (arr, dtype_name)

    with zf.open(pkls[0]) as fh:
        obj = Unpickler(fh).load()
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a state_dict (dict), found {type(obj).__name__}")
    out = collections.OrderedDict()
    for k, v in obj.items():
        if not isinstance(v, Tensor):
            raise ValueError(f"{path}: entry {k} is not a tensor")
        out[k] = v
    return out
