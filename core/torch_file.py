"""Read a PyTorch state-dict file (torch.save) into NumPy arrays, without PyTorch.

Both formats torch.save has written: the zip archive (PyTorch >= 1.6: `<name>/data.pkl` with one `data/<key>` entry
per storage) and the legacy stream (magic number, protocol, system info, the pickled object, the list of storage keys,
then each storage's raw bytes after an 8-byte element count), which is what pytorch-fid's
pt_inception-2015-12-05-6726825d.pth uses. Only what a state dict holds is understood: tensors (rebuilt from storage,
offset, size and stride) in (Ordered)dicts. Every pickle of the file goes through a restricted unpickler: the state
dict's through one that knows the classes above, the legacy stream's header objects (plain ints, strings, dicts and
lists) through one that knows none; any other class or callable is refused before it is looked up, so a file cannot
run code. Users fetch these files from the internet (FID Inception weights, autoencoder .bin files).

Whatever is wrong with a file (not a torch.save file, truncated, damaged, a refused class, a tensor reaching past its
storage) is one NotAStateDict naming the path and the reason in one line; the reader never reads outside a storage
(a tensor's offset, size and stride are checked against it) nor allocates more than the file describes (a legacy
storage's element count is checked against the bytes left in the file; a tensor may not hold more elements than
its storage: a state dict's weights own theirs).
"""

import collections
import io
import os
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


class NotAStateDict(ValueError):
    """A file this reader refuses, with the path and why in one line."""


class _Refused(Exception):
    """Why a file is refused (raised inside the reader; load_state_dict adds the path)."""


class _StorageType:
    def __init__(self, name):
        self.dtype = _DTYPES[name]


class _Storage:
    def __init__(self, dtype, key):
        self.dtype, self.key, self.array = dtype, key, None


def _ints(value, what) -> tuple:
    if not isinstance(value, (tuple, list)) or not all(type(v) is int and v >= 0 for v in value):
        raise _Refused(f"a tensor's {what} {value!r} is not a tuple of integers >= 0")
    return tuple(value)


def _rebuild_tensor(storage, offset, size, stride, *unused):
    """The tensor (a copy) at `offset` of `storage` with `size` and `stride` (in elements), after checking that it
    lies inside the storage: as_strided reads whatever memory the numbers point at."""
    if not isinstance(storage, _Storage) or storage.array is None:
        raise _Refused("a tensor refers to no storage of the file")
    size, stride = _ints(size, "size"), _ints(stride, "stride")
    (offset,) = _ints((offset,), "offset")
    a = storage.array
    if len(size) != len(stride):
        raise _Refused(f"a tensor has size {size} but stride {stride}")
    numel = int(np.prod(size, dtype=np.float64))
    last = offset + sum((n - 1) * s for n, s in zip(size, stride)) if numel else offset - 1
    if numel > len(a) or last >= len(a) or offset > len(a):
        raise _Refused(
            f"a tensor of size {size}, stride {stride} at offset {offset} reaches past its storage of {len(a)} elements"
        )
    if len(size) == 0:
        return a[offset].copy()
    item = a.itemsize
    return np.lib.stride_tricks.as_strided(a[offset:], shape=size, strides=tuple(s * item for s in stride)).copy()


class _Plain(pickle.Unpickler):
    """Plain values only (ints, strings, bytes, lists, tuples, dicts): the legacy stream's header objects. Every
    class and persistent id is refused, before anything is looked up."""

    def find_class(self, module, name):
        raise _Refused(f"its pickle calls {module}.{name}, which is not part of a state dict; refused, not run")

    def persistent_load(self, pid):
        raise _Refused("its header holds a persistent id, which a torch.save header never does")


class _Unpickler(_Plain):
    """A state dict's pickle: the (Ordered)dicts, tensor rebuild calls and storage references it holds."""

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
        if module == "torch" and name in _DTYPES:
            return _StorageType(name)
        if module == "torch" and name.endswith("Storage"):
            raise _Refused(f"its tensors are of torch.{name}, which this reader does not know")
        return super().find_class(module, name)

    def persistent_load(self, pid):
        if not isinstance(pid, tuple) or len(pid) < 5 or pid[0] != "storage":
            raise _Refused(f"unknown persistent id {str(pid)[:80]!r}")
        _kind, stype, key, _location, _numel, *rest = pid
        if isinstance(stype, _StorageType):
            dtype = stype.dtype
        elif str(stype).replace("torch.", "") in _DTYPES:
            dtype = _DTYPES[str(stype).replace("torch.", "")]
        else:
            raise _Refused(f"unknown storage type {str(stype)[:80]!r}")
        if not isinstance(key, str):
            raise _Refused(f"a storage key {key!r} is not a string")
        if key not in self.storages:
            self.storages[key] = _Storage(dtype, key)
        if rest and rest[0] is not None:  # legacy storage views: (view key, offset, size)
            raise _Refused("storage views are not supported")
        return self.storages[key]


def _materialise(obj):
    if isinstance(obj, tuple) and len(obj) == 2 and obj[0] == "tensor":
        return _rebuild_tensor(*obj[1])
    if isinstance(obj, dict):
        return collections.OrderedDict((k, _materialise(v)) for k, v in obj.items())
    return obj


def _plain(f, what: str, kind):
    value = _Plain(f).load()
    if not isinstance(value, kind):
        raise _Refused(f"its {what} is a {type(value).__name__}, not a {kind.__name__}")
    return value


def _read_zip(path: str):
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        pkl = next((n for n in names if n.endswith("data.pkl")), None)
        if pkl is None:
            raise _Refused("a zip archive without data.pkl, so not a torch.save file")
        prefix = pkl[: -len("data.pkl")]
        storages = {}
        obj = _Unpickler(io.BytesIO(z.read(pkl)), storages).load()
        for key, s in storages.items():
            name = f"{prefix}data/{key}"
            if name not in names:
                raise _Refused(f"its storage {key!r} ({name}) is missing")
            s.array = np.frombuffer(z.read(name), dtype=s.dtype)
    return obj


def _read_legacy(path: str):
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        if _Plain(f).load() != LEGACY_MAGIC:
            raise _Refused("not a torch.save file (no magic number)")
        _plain(f, "protocol version", int)
        sys_info = _plain(f, "system info", dict)
        if not sys_info.get("little_endian", True):
            raise _Refused("written big-endian")
        storages = {}
        obj = _Unpickler(f, storages).load()
        keys = _plain(f, "list of storage keys", list)
        for key in keys:
            if key not in storages:
                raise _Refused(f"its storage list names {str(key)[:80]!r}, which no tensor uses")
            s = storages[key]
            (n,) = struct.unpack("<q", f.read(8))
            nbytes = n * np.dtype(s.dtype).itemsize
            if not 0 <= nbytes <= size - f.tell():
                raise _Refused(f"storage {key!r} claims {n} elements, more than the {size - f.tell()} bytes left")
            s.array = np.frombuffer(f.read(nbytes), dtype=s.dtype)
    return obj


def load_state_dict(path: str) -> dict:
    """{name: np.ndarray} of a torch.save'd state dict (either format); NotAStateDict, one line naming `path` and
    why, for anything else."""
    try:
        obj = _read_zip(path) if zipfile.is_zipfile(path) else _read_legacy(path)
        return _materialise(obj)
    except _Refused as e:
        raise NotAStateDict(f"{path}: {e}") from None
    except Exception as e:  # truncated or damaged: whatever the parsers raise, as one line
        line = (str(e).strip().splitlines() or [""])[0][:200]
        raise NotAStateDict(f"{path}: not a readable torch.save'd state dict ({type(e).__name__}: {line})") from None
