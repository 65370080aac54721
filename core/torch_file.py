"""Read a PyTorch state-dict file (torch.save) into NumPy arrays, without PyTorch.

Both formats torch.save has written: the zip archive (PyTorch >= 1.6: `<name>/data.pkl` with one `data/<key>` entry
per storage) and the legacy stream (magic number, protocol, system info, the pickled object, the list of storage keys,
then each storage's raw bytes after an 8-byte element count), which is what pytorch-fid's
pt_inception-2015-12-05-6726825d.pth uses. Only what a state dict holds is understood: tensors (rebuilt from storage,
offset, size and stride) in (Ordered)dicts; any other class in the pickle is refused, so a file cannot run code.
"""

import collections
import io
import pickle
import struct
import zipfile

import numpy as np

_DTYPES = {
    "FloatStorage": np.float32,
    "DoubleStorage": np.float64,
    "HalfStorage": np.float16,
    "LongStorage": np.int64,
    "IntStorage": np.int32,
    "ShortStorage": np.int16,
    "CharStorage": np.int8,
    "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
    "float32": np.float32,
    "float64": np.float64,
    "float16": np.float16,
    "int64": np.int64,
    "int32": np.int32,
    "int16": np.int16,
    "int8": np.int8,
    "uint8": np.uint8,
    "bool": np.bool_,
}
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


class _StorageType:
    def __init__(self, name):
        self.dtype = _DTYPES[name]


class _Storage:
    def __init__(self, dtype, key):
        self.dtype, self.key, self.array = dtype, key, None


def _rebuild_tensor(storage, offset, size, stride, *unused):
    a = storage.array
    if len(size) == 0:
        return a[offset].copy()
    item = a.itemsize
    return np.lib.stride_tricks.as_strided(
        a[offset:], shape=tuple(size), strides=tuple(s * item for s in stride)
    ).copy()


class _Unpickler(pickle.Unpickler):
    ALLOWED = {
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("torch._utils", "_rebuild_tensor_v2"): lambda *a: ("tensor", a),
        ("torch._utils", "_rebuild_tensor"): lambda *a: ("tensor", a),
        ("torch._utils", "_rebuild_parameter"): lambda data, *a: data,
    }

    def __init__(self, f, storages):
        super().__init__(f)
        self.storages = storages

    def find_class(self, module, name):
        if (module, name) in self.ALLOWED:
            return self.ALLOWED[(module, name)]
        if module == "torch" and (name.endswith("Storage") or name in _DTYPES):
            return _StorageType(name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a state dict; refusing to load it")

    def persistent_load(self, pid):
        kind, stype, key, _location, _numel, *rest = pid
        if kind != "storage":
            raise pickle.UnpicklingError(f"unknown persistent id {kind!r}")
        dtype = stype.dtype if isinstance(stype, _StorageType) else _DTYPES[str(stype).replace("torch.", "")]
        if key not in self.storages:
            self.storages[key] = _Storage(dtype, key)
        if rest and rest[0] is not None:  # legacy storage views: (view key, offset, size)
            raise pickle.UnpicklingError("storage views are not supported")
        return self.storages[key]


def _materialise(obj):
    if isinstance(obj, tuple) and len(obj) == 2 and obj[0] == "tensor":
        return _rebuild_tensor(*obj[1])
    if isinstance(obj, dict):
        return collections.OrderedDict((k, _materialise(v)) for k, v in obj.items())
    return obj


def load_state_dict(path: str) -> dict:
    """{name: np.ndarray} of a torch.save'd state dict (either format)."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            pkl = next(n for n in names if n.endswith("data.pkl"))
            prefix = pkl[: -len("data.pkl")]
            storages = {}
            obj = _Unpickler(io.BytesIO(z.read(pkl)), storages).load()
            for key, s in storages.items():
                s.array = np.frombuffer(z.read(f"{prefix}data/{key}"), dtype=s.dtype)
        return _materialise(obj)
    with open(path, "rb") as f:
        if pickle.load(f) != LEGACY_MAGIC:
            raise ValueError(f"{path} is not a torch.save file")
        pickle.load(f)  # protocol version
        sys_info = pickle.load(f)
        if not sys_info.get("little_endian", True):
            raise ValueError(f"{path} was written big-endian")
        storages = {}
        obj = _Unpickler(f, storages).load()
        keys = pickle.load(f)
        for key in keys:
            s = storages[key]
            (n,) = struct.unpack("<q", f.read(8))
            s.array = np.frombuffer(f.read(n * np.dtype(s.dtype).itemsize), dtype=s.dtype)
    return _materialise(obj)
