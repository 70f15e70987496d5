"""Direct C calls for the core pass.

nvidia-ml-py wraps each NVML function in Python: it looks the function
pointer up (a dict read), allocates a fresh ctypes struct, wraps the
argument in ``byref`` and checks the return code.  Once a second, on a CPU
that has gone idle in between, that Python costs about 45 µs of a 180 µs
pass on an H200 (perf/bench_telemetry.py, "direct C calls" line).  A
direct reader does the same call with the function pointer, the output
struct and its ``byref`` made once, and raises the library's own
``NVMLError(code)`` on failure, so everything that handles errors sees the
same exceptions as from the wrapper.

Only the core calls with a known C signature get a reader; anything else
(other bindings, the fake library, a function the driver lacks) keeps the
wrapper.  Values a reader returns as a struct (utilisation, memory) are the
reader's own buffer, valid until its next call: the pass turns them into a
sample before it reads the next GPU.
"""

from __future__ import annotations

import ctypes
from typing import Any, Callable

from backend.telemetry.nvml_codes import NVML_MEMORY_V2

ERR_INSUFFICIENT_SIZE = 7
PROCS_CAPACITY = 64  # process slots read in one call; more falls back to the wrapper, which sizes its array

Reader = Callable[[Any], Any]


def _pointer(lib: Any, name: str) -> Any | None:
    get = getattr(lib, "_nvmlGetFunctionPointer", None)
    if get is None:
        return None
    try:
        return get(name)
    except Exception:  # noqa: BLE001 - not in this driver: the wrapper (and its candidates) handle it
        return None


def _uint_reader(fn: Any, err: Callable[[int], BaseException], ctype: Any, *args: int) -> Reader:
    out = ctype()
    ref = ctypes.byref(out)
    if not args:
        def read(h: Any) -> int:
            ret = fn(h, ref)
            if ret:
                raise err(ret)
            return out.value
    else:
        (a,) = args

        def read(h: Any) -> int:
            ret = fn(h, a, ref)
            if ret:
                raise err(ret)
            return out.value
    return read


def _struct_reader(fn: Any, err: Callable[[int], BaseException], struct: Any, version: int | None = None) -> Reader:
    out = struct()
    ref = ctypes.byref(out)
    if version is None:
        def read(h: Any) -> Any:
            ret = fn(h, ref)
            if ret:
                raise err(ret)
            return out
    else:
        def read(h: Any) -> Any:
            out.version = version
            ret = fn(h, ref)
            if ret:
                raise err(ret)
            return out
    return read


def _procs_reader(fn: Any, err: Callable[[int], BaseException], struct: Any, wrapper: Reader) -> Reader:
    slots = (struct * PROCS_CAPACITY)()
    count = ctypes.c_uint(0)
    cref = ctypes.byref(count)
    copy = struct.from_buffer_copy

    def read(h: Any) -> list[Any]:
        count.value = PROCS_CAPACITY
        ret = fn(h, cref, slots)
        if ret == ERR_INSUFFICIENT_SIZE:  # more processes than slots: the wrapper sizes its own array
            return wrapper(h)
        if ret:
            raise err(ret)
        return [copy(slots[k]) for k in range(min(count.value, PROCS_CAPACITY))]
    return read


def direct_reader(lib: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Reader | None:
    """A reader for ``lib.<name>(handle, *args, **kwargs)`` that calls the C
    function directly, or ``None`` when this call has no known signature or
    the library cannot give its function pointer."""
    err = getattr(lib, "NVMLError", None)
    if not isinstance(err, type):
        return None
    version = kwargs.get("version")
    if set(kwargs) - {"version"}:
        return None
    c_name = name
    if name == "nvmlDeviceGetMemoryInfo" and version:
        c_name = "nvmlDeviceGetMemoryInfo_v2"
    fn = _pointer(lib, c_name)
    if fn is None:
        return None
    if name in ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetPowerManagementLimit"):
        return _uint_reader(fn, err, ctypes.c_uint) if not args else None
    if name in ("nvmlDeviceGetTemperature", "nvmlDeviceGetClockInfo"):
        return _uint_reader(fn, err, ctypes.c_uint, int(args[0])) if len(args) == 1 else None
    if name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons",
                "nvmlDeviceGetTotalEnergyConsumption"):
        return _uint_reader(fn, err, ctypes.c_ulonglong) if not args else None
    if args:
        return None
    if name == "nvmlDeviceGetUtilizationRates":
        struct = getattr(lib, "c_nvmlUtilization_t", None)
        return _struct_reader(fn, err, struct) if struct is not None else None
    if name == "nvmlDeviceGetMemoryInfo":
        if version:
            struct = getattr(lib, "c_nvmlMemory_v2_t", None)
            v = int(version) if isinstance(version, int) else NVML_MEMORY_V2
            return _struct_reader(fn, err, struct, v) if struct is not None else None
        struct = getattr(lib, "c_nvmlMemory_t", None)
        return _struct_reader(fn, err, struct) if struct is not None else None
    if name == "nvmlDeviceGetComputeRunningProcesses_v3":
        struct = getattr(lib, "c_nvmlProcessInfo_v3_t", None)
        wrapper = getattr(lib, name, None)
        if struct is None or wrapper is None:
            return None
        return _procs_reader(fn, err, struct, wrapper)
    return None


# -- the whole scalar pass of one GPU --------------------------------------

# The scalar core calls the batch makes, in CORE_CALLS order: key -> the
# leaf fields of its output that the sample uses (None: the scalar itself).
BATCH_KEYS: tuple[str, ...] = ("util", "memory", "temp", "power", "plimit", "sm_clock", "mem_clock", "throttle")
_WANTED: dict[str, tuple[str, ...] | None] = {"util": ("gpu", "memory"), "memory": ("total", "used")}
_CODES = {ctypes.c_uint: "I", ctypes.c_ulonglong: "Q", ctypes.c_int: "i", ctypes.c_longlong: "q"}
_SCALAR = {
    "nvmlDeviceGetPowerUsage": ctypes.c_uint,
    "nvmlDeviceGetEnforcedPowerLimit": ctypes.c_uint,
    "nvmlDeviceGetPowerManagementLimit": ctypes.c_uint,
    "nvmlDeviceGetTemperature": ctypes.c_uint,
    "nvmlDeviceGetClockInfo": ctypes.c_uint,
    "nvmlDeviceGetCurrentClocksEventReasons": ctypes.c_ulonglong,
    "nvmlDeviceGetCurrentClocksThrottleReasons": ctypes.c_ulonglong,
}
_STRUCT = {"nvmlDeviceGetUtilizationRates": "c_nvmlUtilization_t"}


def _leaf_format(ctype: Any, base: int, wanted: tuple[str, ...] | None) -> list[tuple[int, str]]:
    """(offset, struct code) of each leaf the sample uses."""
    if wanted is None:
        return [(base, _CODES[ctype])]
    out = []
    for name in wanted:
        f = getattr(ctype, name)
        ftype = dict(ctype._fields_)[name]
        out.append((base + f.offset, _CODES[ftype]))
    return out


class BoundPass:
    """One GPU's :class:`DirectPass`: its own buffer, and the calls with their
    whole argument tuples (the handle, plain arguments, the output's place).
    The adapter's pass runs it inline (see ``NvmlAdapter.sample``): ``version``
    first (the memory struct and its version, for memory v2), then each
    ``fn(*args)`` in ``calls`` (a non-zero return is a failure), then
    ``unpack(out)``, which may come after the other GPUs' calls."""

    __slots__ = ("calls", "out", "unpack", "version")

    def __init__(self, calls: tuple[tuple[Any, tuple[Any, ...]], ...], out: Any, unpack: Callable[[Any], tuple],
                 version: tuple[Any, int] | None):
        self.calls = calls
        self.out = out
        self.unpack = unpack
        self.version = version


class DirectPass:
    """The eight scalar core calls of a GPU on the C functions, each writing
    into its place in one buffer, then one unpack of the fields the sample
    uses: (util gpu, util memory, memory total, memory used, temperature,
    power, power limit, SM clock, memory clock, clock event mask).
    :meth:`bind` gives each GPU its own buffer, so a pass can make every
    GPU's calls first and turn the answers into samples after."""

    def __init__(self, Out: Any, fields: list[tuple[str, Any]], pointers: list[tuple[Any, tuple[Any, ...]]],
                 fmt: str, version: int | None):
        import struct

        self._Out = Out
        self._fields = fields
        self._pointers = pointers
        self._unpack = struct.Struct(fmt).unpack_from
        self._version = version

    def bind(self, h: Any) -> BoundPass:
        out = self._Out()
        # each output a typed view into the buffer, so a function declared with typed pointers takes it too
        calls = tuple(
            (fn, (h, *plain, ctypes.byref(ctype.from_buffer(out, getattr(self._Out, key).offset))))
            for (fn, plain), (key, ctype) in zip(self._pointers, self._fields)
        )
        version = (getattr(out, "memory"), self._version) if self._version is not None else None
        return BoundPass(calls, out, self._unpack, version)


def direct_pass(lib: Any, plan: list[tuple[str, str, tuple[Any, ...], dict[str, Any]]]) -> DirectPass | None:
    """A :class:`DirectPass` for the chosen candidates in ``plan`` ((key, name,
    args, kwargs) for every key of ``BATCH_KEYS``, in that order), or ``None``
    when one of them has no known C signature or function pointer."""
    if [p[0] for p in plan] != list(BATCH_KEYS):
        return None
    fields: list[tuple[str, Any]] = []
    pointers: list[tuple[Any, tuple[Any, ...]]] = []  # (function, plain args)
    version = None
    for key, name, args, kwargs in plan:
        if set(kwargs) - {"version"}:
            return None
        v = kwargs.get("version")
        if name == "nvmlDeviceGetMemoryInfo":
            if args:
                return None
            ctype = getattr(lib, "c_nvmlMemory_v2_t" if v else "c_nvmlMemory_t", None)
            c_name = "nvmlDeviceGetMemoryInfo_v2" if v else name
            if v:
                version = int(v) if isinstance(v, int) else NVML_MEMORY_V2
        elif name in _STRUCT:
            ctype, c_name = (getattr(lib, _STRUCT[name], None) if not args else None), name
        elif name in _SCALAR:
            want = 1 if name in ("nvmlDeviceGetTemperature", "nvmlDeviceGetClockInfo") else 0
            if len(args) != want or v:
                return None
            ctype, c_name = _SCALAR[name], name
        else:
            return None
        fn = _pointer(lib, c_name) if ctype is not None else None
        if fn is None:
            return None
        fields.append((key, ctype))
        pointers.append((fn, tuple(int(a) for a in args)))
    try:
        Out = type("Out", (ctypes.Structure,), {"_fields_": fields})
        leaves: list[tuple[int, str]] = []
        for key, ctype in fields:
            leaves += _leaf_format(ctype, getattr(Out, key).offset, _WANTED.get(key))
    except (AttributeError, KeyError, TypeError):  # bindings whose structs lack a field we read
        return None
    fmt, at = "=", 0
    for offset, code in sorted(leaves):
        fmt += "x" * (offset - at) + code
        at = offset + ctypes.sizeof({"I": ctypes.c_uint, "Q": ctypes.c_ulonglong, "i": ctypes.c_int, "q": ctypes.c_longlong}[code])
    return DirectPass(Out, fields, pointers, fmt, version)
