"""Stand-in ``cupy.ndarray`` and the array functions hpcgpu needs.

A "kernel" here checks its operands (device arrays or scalars only), fails
as CuPy would when NVRTC is missing (``check_nvrtc``: arithmetic, ufuncs,
reductions, fancy indexing, dtype conversion, non-zero fills), creates the
context, takes external writes of exposed memory into account, computes
eagerly with NumPy on the ``future`` buffers and queues its writes on the
current stream. See :mod:`cupy._standin`.
"""

from __future__ import annotations

import functools
import math
import operator
import warnings

import numpy

from cupy import _standin
from cupy.cuda import memory
from cupy.cuda import stream as _stream

_SCALARS = (bool, int, float, complex, numpy.generic)


def _is_scalar(x) -> bool:
    return isinstance(x, _SCALARS)


def _unsupported(x) -> TypeError:
    return TypeError("Unsupported type %s" % type(x))


def _addr(a: numpy.ndarray) -> int:
    return a.__array_interface__["data"][0]


# ---------------------------------------------------------------------------
# kernel launch
# ---------------------------------------------------------------------------


def _begin(arrays, compile: bool = True) -> None:
    """Before a kernel: NVRTC, context, devices of the operands, exposed memory."""
    arrays = [a for a in arrays if a is not None]
    if compile:
        _standin.check_nvrtc()
    dev = _standin.current_device()
    if any(a._alloc.nbytes for a in arrays):
        _standin.ensure_context(dev)
    seen = set()
    for a in arrays:
        alloc = a._alloc
        if alloc.nbytes and alloc.device != dev:
            raise ValueError(f"The device where the array resides ({alloc.device}) is different from the "
                             f"current device ({dev}). Peer access is unavailable between these devices.")
        if id(alloc) not in seen:
            seen.add(id(alloc))
            alloc.refresh()


def _end(written, stream=None) -> None:
    """After a kernel: queue its writes on ``stream`` (the current one by default).

    Under a CUDA graph's capture nothing is queued (it runs at the replay),
    and in a replay the writes go to the launch stream; see :mod:`cupy._standin`.
    """
    written = [w for w in written if w is not None]
    stream = _stream.get_current_stream() if stream is None else stream
    if not _standin.kernel_done(stream, written):
        return
    q = _standin.launch_queue(stream)
    _standin.count("launches")
    _standin.record_writes(q, written)


def _h2d_allowed(stream) -> None:
    """CuPy refuses a host-to-device copy on a capturing stream (``copy_from_host_async``)."""
    if _standin.capture_of(stream) is not None:
        raise RuntimeError("the current stream is capturing, so H2D transfers are disallowed")


def _result(res) -> ndarray:
    """A new device array holding host result ``res`` (written by the running kernel)."""
    res = numpy.asarray(res)
    out = ndarray(res.shape, res.dtype)
    out._f[...] = res
    _end([out])
    return out


def _operands(args):
    devs = []
    for x in args:
        if isinstance(x, ndarray):
            devs.append(x)
        elif not _is_scalar(x):
            raise _unsupported(x)
    return devs


def _check_out(out, msg: str = "Output arguments must be cupy.ndarray"):
    if isinstance(out, tuple):
        if len(out) != 1:
            raise ValueError("The 'out' parameter must have exactly one array value")
        out = out[0]
    if out is not None and not isinstance(out, ndarray):
        raise TypeError(msg)
    return out


def _farg(x):
    return x._f if isinstance(x, ndarray) else x


@_standin.replayable()
def _ufunc_call(npf, args, out=None, dtype=None, casting="same_kind"):
    devs = _operands(args)
    out = _check_out(out)
    _begin(devs + [out], compile=True)
    kw = {"casting": casting}
    if dtype is not None:
        kw["dtype"] = dtype
    fargs = [_farg(x) for x in args]
    if out is not None:
        npf(*fargs, out=out._f, **kw)
        _end([out])
        return out
    return _result(npf(*fargs, **kw))


def _make_ufunc(name: str, npf, nin: int):
    def ufunc(*args, out=None, dtype=None, casting="same_kind"):
        if len(args) != nin:
            raise TypeError("Wrong number of arguments for %s" % name)
        return _ufunc_call(npf, args, out=out, dtype=dtype, casting=casting)

    ufunc.__name__ = ufunc.__qualname__ = name
    ufunc.__doc__ = f"Stand-in for ``cupy.{name}`` (an elementwise kernel; ``out`` must be a device array)."
    return ufunc


_UFUNCS = {
    "add": 2, "subtract": 2, "multiply": 2, "divide": 2, "true_divide": 2, "floor_divide": 2,
    "remainder": 2, "mod": 2, "power": 2, "maximum": 2, "minimum": 2, "fmax": 2, "fmin": 2,
    "greater": 2, "greater_equal": 2, "less": 2, "less_equal": 2, "equal": 2, "not_equal": 2,
    "logical_and": 2, "logical_or": 2, "logical_xor": 2, "bitwise_and": 2, "bitwise_or": 2,
    "bitwise_xor": 2, "left_shift": 2, "right_shift": 2, "arctan2": 2, "hypot": 2, "copysign": 2,
    "negative": 1, "positive": 1, "absolute": 1, "abs": 1, "exp": 1, "exp2": 1, "expm1": 1, "log": 1,
    "log2": 1, "log10": 1, "log1p": 1, "sqrt": 1, "square": 1, "reciprocal": 1, "sign": 1, "tanh": 1,
    "sinh": 1, "cosh": 1, "sin": 1, "cos": 1, "tan": 1, "arctan": 1, "floor": 1, "ceil": 1, "trunc": 1,
    "rint": 1, "isfinite": 1, "isnan": 1, "isinf": 1, "logical_not": 1, "invert": 1, "bitwise_not": 1,
    "conjugate": 1, "conj": 1, "signbit": 1,
}
_ufunc_table = {name: _make_ufunc(name, getattr(numpy, name), nin) for name, nin in _UFUNCS.items()}


def clip(a, a_min=None, a_max=None, out=None):
    """Stand-in for ``cupy.clip`` (a kernel).

    Parameters
    ----------
    a : ndarray
    a_min, a_max : scalar or ndarray, optional
    out : ndarray, optional

    Returns
    -------
    ndarray
    """
    args = [x for x in (a, a_min, a_max) if x is not None]
    devs = _operands(args)
    out = _check_out(out)
    _begin(devs + [out])
    r = numpy.clip(_farg(a), _farg(a_min), _farg(a_max), out=None if out is None else out._f)
    if out is not None:
        _end([out])
        return out
    return _result(r)


def where(condition, x=None, y=None):
    """Stand-in for ``cupy.where`` (three arguments: a kernel; one: ``nonzero``).

    Parameters
    ----------
    condition : ndarray
    x, y : ndarray or scalar, optional

    Returns
    -------
    ndarray or tuple of ndarray
    """
    if (x is None) != (y is None):
        raise ValueError("Must provide both 'x' and 'y' or neither.")
    if x is None:
        return nonzero(condition)
    devs = _operands((condition, x, y))
    _begin(devs)
    return _result(numpy.where(_farg(condition), _farg(x), _farg(y)))


def nonzero(a):
    """Stand-in for ``cupy.nonzero`` (a kernel; CuPy synchronizes for the count).

    Parameters
    ----------
    a : ndarray

    Returns
    -------
    tuple of ndarray
    """
    devs = _operands((a,))
    _begin(devs)
    return tuple(_result(i) for i in numpy.nonzero(_farg(a)))


# ---------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------


@_standin.replayable()
def _reduce(npname: str, a, axis=None, dtype=None, out=None, keepdims=False, **extra):
    if not isinstance(a, ndarray):
        raise _unsupported(a)
    out = _check_out(out, "Output arguments type must be cupy.ndarray")
    _begin([a, out])
    f = getattr(numpy, npname)
    kw = dict(axis=axis, keepdims=keepdims, **extra)
    if npname in ("argmax", "argmin"):
        r = f(a._f, **kw)
        if dtype is not None:
            r = numpy.asarray(r).astype(dtype)
    else:
        if dtype is not None:
            kw["dtype"] = dtype
        if out is not None:
            f(a._f, out=out._f, **kw)
            _end([out])
            return out
        r = f(a._f, **kw)
    if out is not None:
        if out.shape != numpy.shape(r):
            raise ValueError(f"Shape mismatch: out {out.shape}, result {numpy.shape(r)}")
        out._f[...] = r
        _end([out])
        return out
    return _result(r)


def _make_reduction(name: str, npname: str, ddof: bool = False):
    if npname in ("max", "min", "all", "any"):
        def red(a, axis=None, out=None, keepdims=False):
            return _reduce(npname, a, axis=axis, out=out, keepdims=keepdims)
    elif ddof:
        def red(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
            return _reduce(npname, a, axis=axis, dtype=dtype, out=out, keepdims=keepdims, ddof=ddof)
    else:
        def red(a, axis=None, dtype=None, out=None, keepdims=False):
            return _reduce(npname, a, axis=axis, dtype=dtype, out=out, keepdims=keepdims)
    red.__name__ = red.__qualname__ = name
    red.__doc__ = f"Stand-in for ``cupy.{name}`` (a reduction kernel; ``out`` must be a device array)."
    return red


_REDUCTIONS = {"sum": "sum", "prod": "prod", "amax": "max", "amin": "min", "max": "max", "min": "min",
               "argmax": "argmax", "argmin": "argmin", "mean": "mean", "all": "all", "any": "any",
               "nansum": "nansum", "count_nonzero": "count_nonzero"}
_reduction_table = {name: _make_reduction(name, np_name) for name, np_name in _REDUCTIONS.items()}
_reduction_table["count_nonzero"] = lambda a, axis=None: _reduce("count_nonzero", a, axis=axis)
_reduction_table["var"] = _make_reduction("var", "var", ddof=True)
_reduction_table["std"] = _make_reduction("std", "std", ddof=True)


# ---------------------------------------------------------------------------
# the array
# ---------------------------------------------------------------------------


class _Flags:
    """``ndarray.flags``: ``c_contiguous``, ``f_contiguous``, ``owndata``; also by key."""

    def __init__(self, c: bool, f: bool, owndata: bool):
        self.c_contiguous, self.f_contiguous, self.owndata = c, f, owndata

    def __getitem__(self, key):
        """Flag by name ('C_CONTIGUOUS', 'F_CONTIGUOUS', 'OWNDATA', 'C', 'F')."""
        names = {"C_CONTIGUOUS": "c_contiguous", "C": "c_contiguous", "CONTIGUOUS": "c_contiguous",
                 "F_CONTIGUOUS": "f_contiguous", "F": "f_contiguous", "FORTRAN": "f_contiguous",
                 "OWNDATA": "owndata", "O": "owndata"}
        return getattr(self, names[key])

    def __repr__(self):
        return (f"  C_CONTIGUOUS : {self.c_contiguous}\n  F_CONTIGUOUS : {self.f_contiguous}\n"
                f"  OWNDATA : {self.owndata}")


class _MemoryPointer:
    """``ndarray.data``: ``ptr`` is the address MPI would get (it exposes the allocation)."""

    def __init__(self, a):
        self._a = a

    @property
    def ptr(self) -> int:
        """Address of the array's first byte (0 when empty)."""
        return self._a.__cuda_array_interface__["data"][0]

    @property
    def device_id(self) -> int:
        """Device of the allocation."""
        return self._a._alloc.device


def _shape_tuple(shape) -> tuple:
    if isinstance(shape, (int, numpy.integer)):
        return (int(shape),)
    return tuple(int(s) for s in shape)


def _index(key):
    """Translate an index for NumPy. Returns (key, device arrays it reads, advanced?)."""
    items = key if isinstance(key, tuple) else (key,)
    out, devs, adv = [], [], False
    for s in items:
        if isinstance(s, ndarray):
            devs.append(s)
            out.append(s._f)
            adv = True
        elif s is None or s is Ellipsis or isinstance(s, slice):
            out.append(s)
        elif isinstance(s, (bool, numpy.bool_)):
            out.append(s)
            adv = True
        elif isinstance(s, (int, numpy.integer)):
            out.append(s)
        elif isinstance(s, (list, tuple, numpy.ndarray)):
            arr = numpy.asarray(s)  # CuPy copies host indices to the device
            if arr.size == 0 and not isinstance(s, numpy.ndarray):
                arr = arr.astype(numpy.int32)
            if arr.dtype.kind not in "biu":
                raise IndexError("arrays used as indices must be of integer (or boolean) type")
            out.append(arr)
            adv = True
        else:
            raise IndexError("only integers, slices (`:`), ellipsis (`...`),numpy.newaxis (`None`) and "
                             "integer or boolean arrays are valid indices")
    if not adv and not any(s is Ellipsis for s in out):
        out.append(Ellipsis)  # a view, also for a full integer index (CuPy returns 0-d arrays)
    return tuple(out), devs, adv


class ndarray:  # noqa: N801  (CuPy's name)
    """Stand-in for ``cupy.ndarray``: a view into a device allocation.

    Parameters
    ----------
    shape : int or tuple of int
    dtype : dtype, optional
    memptr : None
        Not supported.
    strides : None
        Not supported.
    order : {'C', 'F'}

    Notes
    -----
    Host reads (``get``, ``item``, ``float``, ``repr``) synchronize as CuPy
    does and read what has landed. Implicit conversion to NumPy raises
    ``TypeError``; so does mixing in host arrays.
    """

    __slots__ = ("_alloc", "_f", "_base", "__weakref__")
    __hash__ = None

    def __init__(self, shape, dtype=float, memptr=None, strides=None, order="C"):
        if memptr is not None or strides is not None:
            raise NotImplementedError("the CuPy stand-in does not support memptr or strides")
        dtype = numpy.dtype(dtype)
        shape = _shape_tuple(shape)
        if order not in ("C", "F"):
            raise ValueError("order not understood")
        nbytes = math.prod(shape) * dtype.itemsize
        self._alloc = memory.malloc(nbytes, dtype)
        self._f = numpy.ndarray(shape, dtype, buffer=self._alloc.future, order=order)
        self._base = None

    @classmethod
    def _view(cls, alloc, f, base) -> ndarray:
        obj = cls.__new__(cls)
        obj._alloc, obj._f, obj._base = alloc, f, base
        return obj

    def _derive(self, f) -> ndarray:
        return ndarray._view(self._alloc, f, self if self._base is None else self._base)

    def _landed(self) -> numpy.ndarray:
        """The matching view of the landed bytes (what MPI and host reads see)."""
        if self._f.size == 0:
            return numpy.empty(self.shape, self.dtype)
        al = self._alloc
        off = _addr(self._f) - _addr(al.future)
        return numpy.ndarray(self.shape, self.dtype, buffer=al.landed, offset=off, strides=self._f.strides)

    # -- attributes -------------------------------------------------------

    @property
    def shape(self) -> tuple:
        """Dimensions."""
        return self._f.shape

    @shape.setter
    def shape(self, value):
        self._f = numpy.reshape(self._f, _shape_tuple(value), copy=False)

    @property
    def dtype(self) -> numpy.dtype:
        """Element type."""
        return self._f.dtype

    @property
    def size(self) -> int:
        """Number of elements."""
        return self._f.size

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return self._f.ndim

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self._f.itemsize

    @property
    def nbytes(self) -> int:
        """``size * itemsize``."""
        return self._f.nbytes

    @property
    def strides(self) -> tuple:
        """Bytes between elements along each axis."""
        return self._f.strides

    @property
    def flags(self) -> _Flags:
        """Contiguity (``c_contiguous``, ``f_contiguous``) and ``owndata``."""
        fl = self._f.flags
        return _Flags(fl.c_contiguous, fl.f_contiguous, self._base is None)

    @property
    def _c_contiguous(self) -> bool:
        return self._f.flags.c_contiguous

    @property
    def _f_contiguous(self) -> bool:
        return self._f.flags.f_contiguous

    @property
    def base(self):
        """The array this one is a view of, or None."""
        return self._base

    @property
    def device(self):
        """The :class:`cupy.cuda.Device` of the allocation."""
        from cupy.cuda.device import Device

        return Device(self._alloc.device)

    @property
    def data(self) -> _MemoryPointer:
        """Memory pointer (``.ptr``); reading it exposes the allocation like the CUDA array interface."""
        return _MemoryPointer(self)

    @property
    def T(self) -> ndarray:  # noqa: N802
        """Transposed view."""
        return self.transpose()

    @property
    def real(self) -> ndarray:
        """Real part (a view)."""
        return self._derive(self._f.real)

    @property
    def imag(self) -> ndarray:
        """Imaginary part (a view for complex arrays)."""
        if self.dtype.kind != "c":
            _begin([self])
            return _result(numpy.zeros_like(self._f))
        return self._derive(self._f.imag)

    @property
    def __cuda_array_interface__(self) -> dict:
        """CUDA array interface v3; the pointer is into the *landed* bytes.

        Reading it marks the allocation exposed: later kernels take external
        writes (an MPI receive) into account.
        """
        self._alloc.exposed = True
        s = _stream.get_current_stream()
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "descr": self.dtype.descr,
            "stream": s.ptr if s.ptr else 1,
            "version": 3,
            "strides": None if self._f.flags.c_contiguous else self.strides,
            "data": (_addr(self._landed()), False) if self.size else (0, False),
        }

    # -- host transfers ---------------------------------------------------

    def get(self, stream=None, order="C", out=None, blocking=True) -> numpy.ndarray:
        """Copy to the host, as ``cupy.ndarray.get``.

        Parameters
        ----------
        stream : cupy.cuda.Stream, optional
            The copy is ordered on it (default: the current stream), and with
            ``blocking`` it is synchronized first: only its kernels land.
        order : {'C', 'F', 'A'}
        out : numpy.ndarray, optional
            Same shape and dtype.
        blocking : bool
            False: ``out`` is filled at the stream's next synchronize.

        Returns
        -------
        numpy.ndarray
        """
        if stream is None:
            stream = _stream.get_current_stream()
        if out is not None:
            if not isinstance(out, numpy.ndarray):
                raise TypeError("Only numpy.ndarray can be obtained fromcupy.ndarray")
            if self.dtype != out.dtype:
                raise TypeError("{} array cannot be obtained from {} array".format(out.dtype, self.dtype))
            if self.shape != out.shape:
                raise ValueError("Shape mismatch. Expected shape: {}, actual shape: {}".format(
                    self.shape, out.shape))
            if not (out.flags.c_contiguous and self._c_contiguous or out.flags.f_contiguous and self._f_contiguous):
                if out.flags.c_contiguous:
                    src = self._copy_on(stream, "C")
                elif out.flags.f_contiguous:
                    src = self._copy_on(stream, "F")
                else:
                    raise RuntimeError("`out` cannot be specified when copying to non-contiguous ndarray")
            else:
                src = self
            host = out
        else:
            if self.size == 0:
                return numpy.ndarray(self.shape, dtype=self.dtype)
            order = order.upper()
            if order == "A":
                order = "F" if self._f_contiguous else "C"
            if not (order == "C" and self._c_contiguous or order == "F" and self._f_contiguous):
                if order not in ("C", "F"):
                    raise ValueError("unsupported order: {}".format(order))
                src = self._copy_on(stream, order)
            else:
                src = self
            host = numpy.empty(self.shape, dtype=self.dtype, order=order)
        if _standin.capture_of(stream) is not None:
            raise RuntimeError("the current stream is capturing, so D2H transfers are disallowed")
        _standin.count("device_to_host")
        if blocking:
            stream.synchronize()
            host[...] = src._landed()
        else:
            if out is None:
                _standin.poison(host.reshape(-1, order="A").view(numpy.uint8), host.dtype)  # not copied yet
            stream._queue().deferred.append(lambda: host.__setitem__(Ellipsis, src._landed()))
        return host

    def _copy_on(self, stream, order: str) -> ndarray:
        with stream:
            return self.copy(order=order)

    def set(self, arr, stream=None) -> None:
        """Copy host array ``arr`` in (a write queued on the stream), as ``cupy.ndarray.set``.

        Parameters
        ----------
        arr : numpy.ndarray
            Same shape and dtype.
        stream : cupy.cuda.Stream, optional
        """
        if not isinstance(arr, numpy.ndarray):
            raise TypeError("Only numpy.ndarray can be set to cupy.ndarray")
        if self.dtype != arr.dtype:
            raise TypeError("{} array cannot be set to {} array".format(arr.dtype, self.dtype))
        if self.shape != arr.shape:
            raise ValueError("Shape mismatch. Old shape: {}, new shape: {}".format(self.shape, arr.shape))
        if not (self._c_contiguous or self._f_contiguous):
            raise RuntimeError("Cannot set to non-contiguous array")
        if stream is None:
            stream = _stream.get_current_stream()
        _h2d_allowed(stream)
        with stream:
            _begin([self], compile=False)
            self._f[...] = arr
            _end([self])

    def item(self):
        """The one element as a Python scalar (synchronizes, as CuPy).

        Returns
        -------
        scalar
        """
        if self.size != 1:
            raise ValueError("can only convert an array of size 1 to a Python scalar")
        return self.get().item()

    def tolist(self):
        """Nested lists of Python scalars (synchronizes).

        Returns
        -------
        list
        """
        return self.get().tolist()

    def __array__(self, *args, **kwargs):
        """Refuse implicit conversion to NumPy, as CuPy."""
        raise TypeError("Implicit conversion to a NumPy array is not allowed. "
                        "Please use `.get()` to construct a NumPy array explicitly.")

    def __int__(self):
        """As CuPy: ``int(self.get())`` (a synchronizing host read)."""
        _standin.check_host_conversion("int()")
        return int(self.get())

    def __float__(self):
        """As CuPy: ``float(self.get())`` (a synchronizing host read)."""
        _standin.check_host_conversion("float()")
        return float(self.get())

    def __complex__(self):
        """As CuPy: ``complex(self.get())`` (a synchronizing host read)."""
        _standin.check_host_conversion("complex()")
        return complex(self.get())

    def __bool__(self):
        """As CuPy: one element only, read from the host (synchronizes)."""
        _standin.check_host_conversion("bool()")
        if self.size == 0:
            warnings.warn("The truth value of an empty array is ambiguous. Returning False, but in future this "
                          "will result in an error. Use `array.size > 0` to check that an array is not empty.",
                          DeprecationWarning, stacklevel=2)
            return False
        if self.size == 1:
            return bool(self.get())
        raise ValueError("The truth value of an array with more than one element is ambiguous. "
                         "Use a.any() or a.all()")

    def __len__(self):
        """Length of the first axis."""
        if self.ndim == 0:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __iter__(self):
        """Device sub-arrays along the first axis (no host data), as CuPy."""
        _standin.check_host_conversion("iteration")
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    def __repr__(self):
        """``repr`` of the host copy (synchronizes, as CuPy)."""
        return repr(self.get())

    def __str__(self):
        """``str`` of the host copy (synchronizes, as CuPy)."""
        return str(self.get())

    def __format__(self, spec):
        """Format the host copy (synchronizes, as CuPy)."""
        return format(self.get(), spec)

    # -- NumPy protocols --------------------------------------------------

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """NumPy ufuncs on device arrays dispatch to the stand-in (NEP 13), as CuPy."""
        import cupy

        inout = inputs
        if "out" in kwargs:
            out = kwargs["out"]
            if len(out) != 1:
                raise ValueError("The 'out' parameter must have exactly one array value")
            inout += out
            kwargs["out"] = out[0]
        if method != "__call__":
            return NotImplemented
        func = getattr(cupy, ufunc.__name__, None)
        if func is None:
            return NotImplemented
        for x in inout:
            if not (type(x) in _SCALAR_TYPES or isinstance(x, (ndarray, numpy.ndarray))):
                return NotImplemented
        if ufunc.__name__ in ("greater", "greater_equal", "less", "less_equal", "equal", "not_equal"):
            inputs = tuple(x.item() if isinstance(x, numpy.ndarray) and x.ndim == 0 else x for x in inputs)
        return func(*inputs, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        """NumPy functions dispatch to the stand-in's namesake (NEP 18), or fail."""
        import cupy

        try:
            module = functools.reduce(getattr, func.__module__.split(".")[1:], cupy)
            cupy_func = getattr(module, func.__name__)
        except AttributeError:
            return NotImplemented
        if cupy_func is func:
            return NotImplemented
        for t in types:
            if not issubclass(t, (ndarray, numpy.ndarray)):
                return NotImplemented
        return cupy_func(*args, **kwargs)

    # -- indexing ---------------------------------------------------------

    def __getitem__(self, key):
        """Basic indexing gives views; advanced indexing runs a gather kernel."""
        npkey, devs, adv = _index(key)
        if not adv:
            return self._derive(self._f[npkey])
        _begin([self] + devs)
        return _result(self._f[npkey])

    @_standin.replayable()
    def __setitem__(self, key, value):
        """Basic indexing: copy (or ``fill`` for non-arrays); advanced: a scatter kernel."""
        npkey, devs, adv = _index(key)
        if not adv:
            target = self._derive(self._f[npkey])
            if isinstance(value, ndarray):
                if value.dtype == target.dtype and _addr(value._f) == _addr(target._f) and \
                        value.shape == target.shape and value.strides == target.strides:
                    return  # the same memory (CuPy skips it)
                _begin([target, value], compile=value.dtype != target.dtype)
                target._f[...] = value._f
                _end([target])
            else:
                target.fill(value)
            return
        if not isinstance(value, ndarray):
            value = array(value, dtype=self.dtype)  # CuPy: implicit host-to-device copy for advanced indexing
        _begin([self, value] + devs)
        self._f[npkey] = value._f
        _end([self])

    # -- shape ------------------------------------------------------------

    def reshape(self, *shape, order="C") -> ndarray:
        """A view when possible, else a copy (as CuPy).

        Parameters
        ----------
        *shape : int or tuple of int
        order : {'C', 'F'}

        Returns
        -------
        ndarray
        """
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = _shape_tuple(shape)
        known = math.prod(s for s in shape if s != -1)
        if shape.count(-1) > 1 or (shape.count(-1) == 0 and known != self.size) or \
                (shape.count(-1) == 1 and (known == 0 or self.size % known)):
            raise ValueError(f"cannot reshape array of size {self.size} into shape {shape}")
        try:
            return self._derive(numpy.reshape(self._f, shape, order=order, copy=False))
        except ValueError:
            return self.copy(order=order).reshape(shape, order=order)

    def ravel(self, order="C") -> ndarray:
        """Flattened (a view when possible).

        Parameters
        ----------
        order : {'C', 'F'}

        Returns
        -------
        ndarray
        """
        return self.reshape(-1, order=order)

    def flatten(self, order="C") -> ndarray:
        """Flattened copy.

        Parameters
        ----------
        order : {'C', 'F'}

        Returns
        -------
        ndarray
        """
        return self.copy(order=order).reshape(-1, order=order)

    def transpose(self, *axes) -> ndarray:
        """Permuted view.

        Parameters
        ----------
        *axes : int

        Returns
        -------
        ndarray
        """
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        return self._derive(self._f.transpose(*axes) if axes else self._f.T)

    def swapaxes(self, axis1: int, axis2: int) -> ndarray:
        """View with two axes swapped.

        Parameters
        ----------
        axis1, axis2 : int

        Returns
        -------
        ndarray
        """
        return self._derive(self._f.swapaxes(axis1, axis2))

    def squeeze(self, axis=None) -> ndarray:
        """View without length-1 axes.

        Parameters
        ----------
        axis : int or tuple of int, optional

        Returns
        -------
        ndarray
        """
        return self._derive(self._f.squeeze(axis))

    def view(self, dtype=None) -> ndarray:
        """View of the same memory, possibly as another dtype.

        Parameters
        ----------
        dtype : dtype, optional

        Returns
        -------
        ndarray
        """
        return self._derive(self._f.view() if dtype is None else self._f.view(dtype))

    # -- copies and fills -------------------------------------------------

    @_standin.replayable()
    def copy(self, order="C") -> ndarray:
        """A copy in new memory (a copy kernel).

        Parameters
        ----------
        order : {'C', 'F', 'A', 'K'}

        Returns
        -------
        ndarray
        """
        return self.astype(self.dtype, order=order, copy=True)

    @_standin.replayable()
    def astype(self, dtype, order="K", casting=None, subok=None, copy=True) -> ndarray:
        """Converted copy (a kernel; compiled unless the dtype is the same).

        Parameters
        ----------
        dtype : dtype
        order : {'C', 'F', 'A', 'K'}
        casting : str, optional
        subok : None
        copy : bool

        Returns
        -------
        ndarray
        """
        dtype = numpy.dtype(dtype)
        if not copy and dtype == self.dtype:
            if order in ("K", "A") or (order == "C" and self._c_contiguous) or (order == "F" and self._f_contiguous):
                return self
        template = numpy.empty_like(self._f, dtype=dtype, order=order)
        out = ndarray._view(memory.malloc(template.nbytes, dtype), None, None)
        out._f = numpy.ndarray(template.shape, dtype, buffer=out._alloc.future, strides=template.strides)
        _begin([self, out], compile=dtype != self.dtype)
        if casting is None:
            out._f[...] = self._f
        else:
            numpy.copyto(out._f, self._f, casting=casting)
        _end([out])
        return out

    @_standin.replayable()
    def fill(self, value) -> None:
        """Fill with a scalar: a memset for 0 on C-contiguous arrays, else a compiled kernel.

        Parameters
        ----------
        value : scalar or 0-d array
        """
        if isinstance(value, ndarray):
            if value.shape != ():
                raise ValueError("non-scalar cupy.ndarray cannot be used for fill")
            _begin([self, value])
            self._f[...] = value._f
            _end([self])
            return
        if isinstance(value, numpy.ndarray):
            if value.shape != ():
                raise ValueError("non-scalar numpy.ndarray cannot be used for fill")
            value = value.astype(self.dtype, copy=False).item()
        if not _is_scalar(value):
            raise _unsupported(value)
        _begin([self], compile=not (value == 0 and self._c_contiguous))
        self._f[...] = value
        _end([self])

    # -- reductions and products -----------------------------------------

    def sum(self, axis=None, dtype=None, out=None, keepdims=False):
        """See :func:`cupy.sum`."""
        return _reduce("sum", self, axis, dtype, out, keepdims)

    def prod(self, axis=None, dtype=None, out=None, keepdims=False):
        """See :func:`cupy.prod`."""
        return _reduce("prod", self, axis, dtype, out, keepdims)

    def max(self, axis=None, out=None, keepdims=False):
        """See :func:`cupy.amax`."""
        return _reduce("max", self, axis, None, out, keepdims)

    def min(self, axis=None, out=None, keepdims=False):
        """See :func:`cupy.amin`."""
        return _reduce("min", self, axis, None, out, keepdims)

    def argmax(self, axis=None, out=None, dtype=None, keepdims=False):
        """See :func:`cupy.argmax`."""
        return _reduce("argmax", self, axis, dtype, out, keepdims)

    def argmin(self, axis=None, out=None, dtype=None, keepdims=False):
        """See :func:`cupy.argmin`."""
        return _reduce("argmin", self, axis, dtype, out, keepdims)

    def mean(self, axis=None, dtype=None, out=None, keepdims=False):
        """See :func:`cupy.mean`."""
        return _reduce("mean", self, axis, dtype, out, keepdims)

    def var(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
        """See :func:`cupy.var`."""
        return _reduce("var", self, axis, dtype, out, keepdims, ddof=ddof)

    def std(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
        """See :func:`cupy.std`."""
        return _reduce("std", self, axis, dtype, out, keepdims, ddof=ddof)

    def all(self, axis=None, out=None, keepdims=False):
        """See :func:`cupy.all`."""
        return _reduce("all", self, axis, None, out, keepdims)

    def any(self, axis=None, out=None, keepdims=False):
        """See :func:`cupy.any`."""
        return _reduce("any", self, axis, None, out, keepdims)

    def dot(self, b, out=None):
        """See :func:`cupy.dot`."""
        return dot(self, b, out=out)

    def conj(self):
        """Complex conjugate (a kernel)."""
        return _ufunc_table["conjugate"](self)

    def clip(self, a_min=None, a_max=None, out=None):
        """See :func:`cupy.clip`."""
        return clip(self, a_min, a_max, out=out)

    @_standin.replayable()
    def take(self, indices, axis=None, out=None):
        """See :func:`cupy.take`."""
        return take(self, indices, axis=axis, out=out)


_SCALAR_TYPES = {bool, int, float, complex} | {t for t in numpy.sctypeDict.values() if issubclass(t, numpy.generic)}


def _binop(func, reflected: bool = False, inplace: bool = False):
    if inplace:
        def op(self, other):
            return func(self, other, out=self)
    elif reflected:
        def op(self, other):
            return func(other, self)
    else:
        def op(self, other):
            return func(self, other)
    return op


def _cmpop(func):
    def op(self, other):
        if not (isinstance(other, (ndarray, numpy.ndarray)) or _is_scalar(other)):
            return NotImplemented
        return func(self, other)
    return op


for _name, _fn in [("add", "add"), ("sub", "subtract"), ("mul", "multiply"), ("truediv", "true_divide"),
                   ("floordiv", "floor_divide"), ("mod", "remainder"), ("pow", "power"),
                   ("and", "bitwise_and"), ("or", "bitwise_or"), ("xor", "bitwise_xor"),
                   ("lshift", "left_shift"), ("rshift", "right_shift")]:
    setattr(ndarray, f"__{_name}__", _binop(_ufunc_table[_fn]))
    setattr(ndarray, f"__r{_name}__", _binop(_ufunc_table[_fn], reflected=True))
    setattr(ndarray, f"__i{_name}__", _binop(_ufunc_table[_fn], inplace=True))
for _name, _fn in [("lt", "less"), ("le", "less_equal"), ("gt", "greater"), ("ge", "greater_equal"),
                   ("eq", "equal"), ("ne", "not_equal")]:
    setattr(ndarray, f"__{_name}__", _cmpop(_ufunc_table[_fn]))
for _name, _fn in [("neg", "negative"), ("pos", "positive"), ("abs", "absolute"), ("invert", "invert")]:
    setattr(ndarray, f"__{_name}__", (lambda f: lambda self: f(self))(_ufunc_table[_fn]))
ndarray.__matmul__ = lambda self, other: matmul(self, other)
ndarray.__rmatmul__ = lambda self, other: matmul(other, self)
ndarray.__hash__ = None


# ---------------------------------------------------------------------------
# creation
# ---------------------------------------------------------------------------


def empty(shape, dtype=float, order="C") -> ndarray:
    """Uninitialized (poisoned) device array.

    Parameters
    ----------
    shape : int or tuple of int
    dtype : dtype
    order : {'C', 'F'}

    Returns
    -------
    ndarray
    """
    return ndarray(shape, dtype, order=order)


def zeros(shape, dtype=float, order="C") -> ndarray:
    """Zeros (a memset queued on the current stream).

    Parameters
    ----------
    shape : int or tuple of int
    dtype : dtype
    order : {'C', 'F'}

    Returns
    -------
    ndarray
    """
    a = ndarray(shape, dtype, order=order)
    _begin([a], compile=False)
    a._f[...] = 0
    _end([a])
    return a


def ones(shape, dtype=float, order="C") -> ndarray:
    """Ones (a fill kernel).

    Parameters
    ----------
    shape : int or tuple of int
    dtype : dtype
    order : {'C', 'F'}

    Returns
    -------
    ndarray
    """
    a = ndarray(shape, dtype, order=order)
    a.fill(1)
    return a


def full(shape, fill_value, dtype=None, order="C") -> ndarray:
    """Array filled with ``fill_value``.

    Parameters
    ----------
    shape : int or tuple of int
    fill_value : scalar or 0-d array
    dtype : dtype, optional
    order : {'C', 'F'}

    Returns
    -------
    ndarray
    """
    if dtype is None:
        dtype = fill_value.dtype if isinstance(fill_value, ndarray) else numpy.array(fill_value).dtype
    a = ndarray(shape, dtype, order=order)
    a.fill(fill_value)
    return a


def _like_args(a, dtype, order, shape):
    dtype = a.dtype if dtype is None else dtype
    shape = a.shape if shape is None else shape
    if order in ("K", "A"):
        order = "F" if (getattr(a, "flags", None) is not None and a.flags.f_contiguous
                        and not a.flags.c_contiguous) else "C"
    return shape, dtype, order


def empty_like(a, dtype=None, order="K", subok=None, shape=None) -> ndarray:
    """Uninitialized array like ``a``.

    Parameters
    ----------
    a : ndarray
    dtype : dtype, optional
    order : {'C', 'F', 'A', 'K'}
    subok : None
    shape : tuple of int, optional

    Returns
    -------
    ndarray
    """
    return empty(*_like_args(a, dtype, order, shape))


def zeros_like(a, dtype=None, order="K", subok=None, shape=None) -> ndarray:
    """Zeros like ``a``.

    Parameters
    ----------
    a : ndarray
    dtype : dtype, optional
    order : {'C', 'F', 'A', 'K'}
    subok : None
    shape : tuple of int, optional

    Returns
    -------
    ndarray
    """
    return zeros(*_like_args(a, dtype, order, shape))


def ones_like(a, dtype=None, order="K", subok=None, shape=None) -> ndarray:
    """Ones like ``a``.

    Parameters
    ----------
    a : ndarray
    dtype : dtype, optional
    order : {'C', 'F', 'A', 'K'}
    subok : None
    shape : tuple of int, optional

    Returns
    -------
    ndarray
    """
    return ones(*_like_args(a, dtype, order, shape))


def full_like(a, fill_value, dtype=None, order="K", subok=None, shape=None) -> ndarray:
    """Filled like ``a``.

    Parameters
    ----------
    a : ndarray
    fill_value : scalar
    dtype : dtype, optional
    order : {'C', 'F', 'A', 'K'}
    subok : None
    shape : tuple of int, optional

    Returns
    -------
    ndarray
    """
    shape, dtype, order = _like_args(a, dtype, order, shape)
    return full(shape, fill_value, dtype, order)


def array(obj, dtype=None, copy=True, order="K", subok=False, ndmin=0) -> ndarray:
    """Device array from host data (a host-to-device copy queued on the stream) or a device array.

    Parameters
    ----------
    obj : array_like or ndarray
    dtype : dtype, optional
    copy : bool
    order : {'C', 'F', 'A', 'K'}
    subok : bool
    ndmin : int

    Returns
    -------
    ndarray
    """
    if isinstance(obj, ndarray):
        a = obj.astype(obj.dtype if dtype is None else dtype, order=order, copy=copy)
        if a.ndim < ndmin:
            a = a.reshape((1,) * (ndmin - a.ndim) + a.shape)
        return a
    host = numpy.array(obj, dtype=dtype, order=order, ndmin=ndmin)
    if host.dtype.kind in "OSUV" and host.dtype.name != "bfloat16":  # CuPy >= 14 takes ml_dtypes' bfloat16
        raise ValueError(f"Unsupported dtype {host.dtype}")
    template = numpy.empty_like(host, order="K")
    out = ndarray._view(memory.malloc(host.nbytes, host.dtype), None, None)
    out._f = numpy.ndarray(host.shape, host.dtype, buffer=out._alloc.future, strides=template.strides)
    _h2d_allowed(_stream.get_current_stream())
    _begin([out], compile=False)
    out._f[...] = host
    _end([out])
    return out


def asarray(a, dtype=None, order=None) -> ndarray:
    """``a`` itself when it is a device array of that dtype, else :func:`array`.

    Parameters
    ----------
    a : array_like or ndarray
    dtype : dtype, optional
    order : {'C', 'F', 'A', 'K'}, optional

    Returns
    -------
    ndarray
    """
    if isinstance(a, ndarray):
        return a.astype(a.dtype if dtype is None else dtype, order=order or "K", copy=False)
    return array(a, dtype=dtype, order=order or "K")


def ascontiguousarray(a, dtype=None) -> ndarray:
    """C-contiguous device array (a copy only when needed).

    Parameters
    ----------
    a : ndarray
    dtype : dtype, optional

    Returns
    -------
    ndarray
    """
    return asarray(a, dtype=dtype, order="C")


def asfortranarray(a, dtype=None) -> ndarray:
    """Fortran-contiguous device array (a copy only when needed).

    Parameters
    ----------
    a : ndarray
    dtype : dtype, optional

    Returns
    -------
    ndarray
    """
    return asarray(a, dtype=dtype, order="F")


def asnumpy(a, stream=None, order="C", out=None, blocking=True) -> numpy.ndarray:
    """Host copy of ``a`` (``a.get()`` for device arrays; host arrays as they are).

    Parameters
    ----------
    a : ndarray or array_like
    stream : cupy.cuda.Stream, optional
    order : {'C', 'F', 'A'}
    out : numpy.ndarray, optional
    blocking : bool

    Returns
    -------
    numpy.ndarray
    """
    if isinstance(a, ndarray):
        return a.get(stream=stream, order=order, out=out, blocking=blocking)
    if out is None:
        return numpy.asarray(a, order=order)
    out[...] = a
    return out


def arange(start, stop=None, step=1, dtype=None) -> ndarray:
    """Stand-in for ``cupy.arange`` (a kernel).

    Parameters
    ----------
    start, stop, step : scalar
    dtype : dtype, optional

    Returns
    -------
    ndarray
    """
    r = numpy.arange(start, stop, step, dtype=dtype) if stop is not None else numpy.arange(start, dtype=dtype,
                                                                                           step=step)
    _begin([])
    return _result(r)


def copyto(dst, src, casting="same_kind", where=None) -> None:
    """Copy ``src`` (device array or scalar) into device array ``dst``.

    Parameters
    ----------
    dst : ndarray
    src : ndarray or scalar
    casting : str
    where : ndarray, optional
    """
    if not isinstance(dst, ndarray):
        raise TypeError("dst must be cupy.ndarray")
    devs = _operands([src] + ([where] if where is not None else []))
    _begin([dst] + devs, compile=not (isinstance(src, ndarray) and src.dtype == dst.dtype and where is None))
    numpy.copyto(dst._f, _farg(src), casting=casting, where=True if where is None else where._f)
    _end([dst])


@_standin.replayable()
def take(a, indices, axis=None, out=None) -> ndarray:
    """Stand-in for ``cupy.take`` (a gather kernel).

    Out-of-bounds indices raise ``IndexError`` (a GPU would wrap them silently).

    Parameters
    ----------
    a : ndarray
    indices : ndarray or array_like of int
    axis : int, optional
    out : ndarray, optional
        Device array of the result's shape and ``a``'s dtype.

    Returns
    -------
    ndarray
    """
    if not isinstance(a, ndarray):
        raise _unsupported(a)
    out = _check_out(out)
    if isinstance(indices, ndarray):
        idx_dev, idx = [indices], indices._f
    else:
        idx_dev, idx = [], numpy.asarray(indices)
    idx_shape = numpy.shape(idx)
    if axis is None:
        shape = idx_shape
    else:
        ax = operator.index(axis) % max(a.ndim, 1)
        shape = a.shape[:ax] + idx_shape + a.shape[ax + 1:]
    if out is not None:
        if out.shape != shape:
            raise ValueError("Output shape mismatch")
        if out.dtype != a.dtype:
            raise TypeError("Output dtype mismatch")
    _begin([a, out] + idx_dev)
    if out is not None:
        r = numpy.take(a._f, idx, axis=axis)
        out._f[...] = r
        _end([out])
        return out
    return _result(numpy.take(a._f, idx, axis=axis))


def concatenate(tup, axis=0, out=None, *, dtype=None, casting="same_kind") -> ndarray:
    """Stand-in for ``cupy.concatenate`` (a kernel).

    Parameters
    ----------
    tup : sequence of ndarray
    axis : int
    out : ndarray, optional
    dtype : dtype, optional
    casting : str

    Returns
    -------
    ndarray
    """
    tup = list(tup)
    for x in tup:
        if not isinstance(x, ndarray):
            raise _unsupported(x)
    out = _check_out(out)
    _begin(tup + [out])
    r = numpy.concatenate([x._f for x in tup], axis=axis, dtype=dtype, casting=casting)
    if out is not None:
        if out.shape != r.shape:
            raise ValueError("Output array has an invalid size")
        out._f[...] = r
        _end([out])
        return out
    return _result(r)


def stack(tup, axis=0, out=None) -> ndarray:
    """Stand-in for ``cupy.stack`` (a kernel).

    Parameters
    ----------
    tup : sequence of ndarray
    axis : int
    out : ndarray, optional

    Returns
    -------
    ndarray
    """
    tup = [x if not isinstance(x, ndarray) else x.reshape((1,) + x.shape) for x in tup]
    ax = axis if axis >= 0 else axis + tup[0].ndim
    moved = [x if ax == 0 else x.transpose(list(range(1, ax + 1)) + [0] + list(range(ax + 1, x.ndim)))
             for x in tup]
    return concatenate(moved, axis=ax, out=out)


def reshape(a, newshape, order="C") -> ndarray:
    """See :meth:`ndarray.reshape`."""
    return a.reshape(newshape, order=order)


def ravel(a, order="C") -> ndarray:
    """See :meth:`ndarray.ravel`."""
    return a.ravel(order=order)


def transpose(a, axes=None) -> ndarray:
    """See :meth:`ndarray.transpose`."""
    return a.transpose(axes) if axes is not None else a.transpose()


def squeeze(a, axis=None) -> ndarray:
    """See :meth:`ndarray.squeeze`."""
    return a.squeeze(axis)


def expand_dims(a, axis) -> ndarray:
    """View with a new length-1 axis.

    Parameters
    ----------
    a : ndarray
    axis : int

    Returns
    -------
    ndarray
    """
    return a._derive(numpy.expand_dims(a._f, axis))


def broadcast_to(a, shape) -> ndarray:
    """Read-only broadcast view.

    Parameters
    ----------
    a : ndarray
    shape : tuple of int

    Returns
    -------
    ndarray
    """
    return a._derive(numpy.broadcast_to(a._f, _shape_tuple(shape)))


def get_array_module(*args):
    """``cupy`` when any argument is a device array, else ``numpy``.

    Parameters
    ----------
    *args : object

    Returns
    -------
    module
    """
    import cupy

    return cupy if any(isinstance(a, ndarray) for a in args) else numpy


# ---------------------------------------------------------------------------
# matrix products
# ---------------------------------------------------------------------------

_CUBLAS_COMPUTE = {"e": "CUBLAS_COMPUTE_32F", "f": "CUBLAS_COMPUTE_32F", "F": "CUBLAS_COMPUTE_32F",
                   "d": "CUBLAS_COMPUTE_64F", "D": "CUBLAS_COMPUTE_64F"}


def _tf32(x: numpy.ndarray) -> numpy.ndarray:
    """Round float32 (or complex64) values to TF32 (10 mantissa bits, nearest even)."""
    if x.dtype == numpy.complex64:
        r = numpy.empty(x.shape, numpy.complex64)
        r.real, r.imag = _tf32(numpy.ascontiguousarray(x.real)), _tf32(numpy.ascontiguousarray(x.imag))
        return r
    v = numpy.array(x, dtype=numpy.float32, copy=True)
    bits = v.view(numpy.uint32)
    rounded = (bits + numpy.uint32(0xFFF) + ((bits >> numpy.uint32(13)) & numpy.uint32(1))) & numpy.uint32(0xFFFFE000)
    return numpy.where(numpy.isfinite(v), rounded, bits).view(numpy.float32)


def cublas_compute_type(dtype) -> str:
    """The cuBLAS compute type CuPy's ``matmul``/``dot`` (``tensordot_core_v11``) would use.

    Parameters
    ----------
    dtype : dtype

    Returns
    -------
    str
    """
    dtype = numpy.dtype(dtype)
    ct = _standin.compute_type(dtype)
    if ct == "COMPUTE_TYPE_TF32" and dtype.char in "fF":
        return "CUBLAS_COMPUTE_32F_FAST_TF32"
    return _CUBLAS_COMPUTE[dtype.char]


def _product(api: str, npf, a, b, out, shape, m: int, n: int, k: int, vector_dot: bool):
    ret = numpy.promote_types(a.dtype, b.dtype)
    if a.size == 0 or b.size == 0:
        res = out if out is not None else empty(shape, ret)
        res.fill(0)  # CuPy: out.fill(0), no cuBLAS
        return res
    mixed = a.dtype != ret or b.dtype != ret
    use_blas = ret.kind in "fc" and not vector_dot
    if use_blas:
        from cupy.cuda import cublas, device

        # loads cuBLAS (ImportError when it is missing); CuPy sets the handle's stream to the current one on
        # every call, which it refuses on a capturing stream (NotImplementedError)
        cublas.setStream(device.get_cublas_handle(), _stream.get_current_stream().ptr)
    _begin([a, b, out], compile=mixed or not use_blas)
    fa, fb = a._f.astype(ret, copy=False), b._f.astype(ret, copy=False)
    if use_blas:
        ct = cublas_compute_type(ret)
        if ct == "CUBLAS_COMPUTE_32F_FAST_TF32":
            fa, fb = _tf32(fa), _tf32(fb)
        if ret == numpy.float16:
            r = npf(fa.astype(numpy.float32), fb.astype(numpy.float32)).astype(numpy.float16)
        else:
            r = npf(fa, fb)
        _standin.log_gemm({"api": api, "dtype": str(ret), "m": m, "n": n, "k": k, "compute_type": ct,
                           "math_mode": "CUBLAS_DEFAULT_MATH", "algo": "CUBLAS_GEMM_DEFAULT_TENSOR_OP"})
    else:
        r = npf(fa, fb)
    if out is not None:
        out._f[...] = r
        _end([out])
        return out
    return _result(r)


def matmul(a, b, out=None, **kwargs) -> ndarray:
    """Stand-in for ``cupy.matmul``: cuBLAS for floating types (logged), kernels otherwise.

    Parameters
    ----------
    a, b : ndarray
    out : ndarray, optional
        Device array of the result's shape.

    Returns
    -------
    ndarray
    """
    for x in (a, b):
        if _is_scalar(x):
            raise ValueError("Scalar operands are not allowed, use '*' instead")
        if not isinstance(x, ndarray):
            raise _unsupported(x)
    out = _check_out(out)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("Scalar operands are not allowed, use '*' instead")
    a2 = a.shape if a.ndim > 1 else (1,) + a.shape
    b2 = b.shape if b.ndim > 1 else b.shape + (1,)
    if a2[-1] != b2[-2]:
        if max(a.ndim, b.ndim) <= 2:
            raise ValueError("Axis dimension mismatch")
        raise ValueError("shapes ({}) and ({}) not aligned".format(",".join(map(str, a.shape)),
                                                                    ",".join(map(str, b.shape))))
    try:
        batch = numpy.broadcast_shapes(a2[:-2], b2[:-2])
    except ValueError:
        raise ValueError("operands could not be broadcast together with remapped shapes") from None
    shape = batch + (a2[-2],) * (a.ndim > 1) + (b2[-1],) * (b.ndim > 1)
    if out is not None and out.shape != shape:
        raise ValueError("Output array has an invalid size")
    m, k, n = a2[-2], a2[-1], b2[-1]
    vector_dot = max(a.ndim, b.ndim) <= 2 and m == 1 and n == 1
    return _product("matmul", numpy.matmul, a, b, out, shape, m, n, k, vector_dot)


def dot(a, b, out=None) -> ndarray:
    """Stand-in for ``cupy.dot``.

    Parameters
    ----------
    a, b : ndarray
    out : ndarray, optional
        C-contiguous device array of the result's dtype and shape.

    Returns
    -------
    ndarray
    """
    for x in (a, b):
        if not isinstance(x, ndarray):
            raise _unsupported(x)
    out = _check_out(out)
    if out is not None:
        if numpy.result_type(a.dtype, b.dtype) != out.dtype:
            raise ValueError("Not supported dtype combination.")
        if not out._c_contiguous:
            raise ValueError("Output array must be C-contiguous")
    if a.ndim == 0 or b.ndim == 0:
        return _ufunc_table["multiply"](a, b, out=out)
    ka = a.shape[-1]
    kb = b.shape[-2] if b.ndim > 1 else b.shape[0]
    if ka != kb:
        raise ValueError("Axis dimension mismatch")
    shape = a.shape[:-1] + b.shape[:-2] + b.shape[-1:] if b.ndim > 1 else a.shape[:-1]
    if out is not None and out.shape != shape:
        raise ValueError("Output array has an invalid size")
    m = math.prod(a.shape[:-1])
    n = b.size // kb if kb else 0
    return _product("dot", numpy.dot, a, b, out, shape, m, n, ka, m == 1 and n == 1)
