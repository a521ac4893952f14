"""Stand-in ``cupy.ElementwiseKernel``: the kernel's own CUDA C++, compiled for the host and run.

Real CuPy wraps ``operation`` in a CUDA kernel, one thread an element, and
compiles it with NVRTC at the first call for each argument type signature.
The stand-in wraps it the same way in a C++ function, one loop iteration an
element, compiles it with the host's C++ compiler (``$CXX``, else ``c++``
or ``g++``) and runs it through ctypes. So a fused kernel of hpcgpu is
checked here as written: a syntax or type error fails here as NVRTC would
fail on a GPU node (``CompileException``), and the results come from the
same C, not from a Python imitation.

Modeled, as CuPy (``cupy/_core/_kernel.pyx``, v13): parameters ``T name``
(a type placeholder, bound from the arrays, then from the outputs' dtypes)
or ``dtype name`` (``float32``, ``int64``, ...), ``raw`` parameters (a
``CArray`` indexed by a flat C-order index, ``size()``); inputs are
``const`` (writing one, raw or not, does not compile); outputs given are
written in place, missing ones allocated with their placeholder's type; the
loop runs over the broadcast shape of the non-raw arrays; ``i`` is the
element's index and ``_ind.size()`` the element count; scalars take their
parameter's type. CUDA's ``max``/``min`` of floating types are ``fmax`` /
``fmin`` (a NaN operand gives the other), of integers the usual ones.

Not modeled: ``preamble``, ``reduce_dims`` and other keywords (refused);
CUDA-only syntax (``__syncthreads``, ``atomicAdd``, ...: a compile error
here, so a kernel needing them needs a stand-in of its own); races between
threads (the loop is serial); floating-point results are the host's (no FMA
contraction, libm's ``exp``/``log``): compare with a tolerance.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile

import numpy

from cupy._standin import replayable as _replayable_deco

_replayable = _replayable_deco()

_CTYPE = {
    "float16": None, "float32": "float", "float64": "double", "int8": "signed char", "int16": "short",
    "int32": "int", "int64": "long long", "uint8": "unsigned char", "uint16": "unsigned short",
    "uint32": "unsigned int", "uint64": "unsigned long long", "bool": "bool",
}

_PRELUDE = r"""
#include <cmath>
#include <cstddef>
#include <type_traits>
using std::exp; using std::log; using std::sqrt; using std::abs; using std::fabs; using std::tanh;
template <typename A, typename B> static inline auto max(A a, B b) {
  if constexpr (std::is_floating_point_v<A> || std::is_floating_point_v<B>) return std::fmax(a, b);
  else return a > b ? a : b;
}
template <typename A, typename B> static inline auto min(A a, B b) {
  if constexpr (std::is_floating_point_v<A> || std::is_floating_point_v<B>) return std::fmin(a, b);
  else return a < b ? a : b;
}
template <typename T> struct CArray {
  T* data_; ptrdiff_t size_;
  T& operator[](ptrdiff_t k) const { return data_[k]; }
  ptrdiff_t size() const { return size_; }
};
template <typename T> struct CArray<const T> {
  const T* data_; ptrdiff_t size_;
  const T& operator[](ptrdiff_t k) const { return data_[k]; }
  ptrdiff_t size() const { return size_; }
};
struct CIndexer { ptrdiff_t size_; ptrdiff_t size() const { return size_; } };
"""


class CompileException(Exception):
    """As ``cupy.cuda.compiler.CompileException``: the kernel's C++ did not compile."""


def _compiler() -> str:
    for name in (os.environ.get("CXX"), "c++", "g++"):
        if name and shutil.which(name):
            return shutil.which(name)
    raise RuntimeError("the CuPy stand-in compiles ElementwiseKernels with the host's C++ compiler: "
                       "none found (set CXX, or install g++)")


_LIBS: dict[str, ctypes.CDLL] = {}
_FLAGS = ("-std=c++17", "-O1", "-shared", "-fPIC")
_IDENTITY: list = []


def _identity() -> str:
    """The compiler's path and version: part of the cache key (another compiler, another library)."""
    if not _IDENTITY:
        cxx = _compiler()
        version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60).stdout
        _IDENTITY.append(f"{cxx}\n{version}\n{' '.join(_FLAGS)}")
    return _IDENTITY[0]


def _cache_dir() -> str:
    """``$XDG_CACHE_HOME/hpcgpu/standin-kernels`` (else ``~/.cache/...``): this user's, mode 0700.

    Not the temporary directory: many CI runners mount it ``noexec``, and a
    shared one would let another user plant a library the tests load.
    """
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(base, "hpcgpu", "standin-kernels")
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.stat(path)
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise RuntimeError(f"the stand-in's kernel cache {path} is not this user's alone: remove it")
    return path


def _build(source: str) -> ctypes.CDLL:
    """Compile ``source`` to a shared library, cached in-process and on disk by its hash and the compiler."""
    digest = hashlib.sha256((_identity() + "\n" + source).encode()).hexdigest()[:24]
    lib = _LIBS.get(digest)
    if lib is not None:
        return lib
    cache = _cache_dir()
    path = os.path.join(cache, f"{digest}.so")
    if not os.path.exists(path):
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=cache)
        os.close(fd)
        try:
            p = subprocess.run([_compiler(), *_FLAGS, "-x", "c++", "-", "-o", tmp], input=source,
                               capture_output=True, text=True, timeout=300)
            if p.returncode != 0:
                raise CompileException(p.stderr.strip() + "\n\n" + source)
            os.replace(tmp, path)  # atomic: ranks compiling the same kernel at once all get a whole library
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    lib = _LIBS[digest] = ctypes.CDLL(path)
    return lib


def _params(text: str, is_input: bool):
    out = []
    for p in (x.strip() for x in text.split(",") if x.strip()):
        parts = p.split()
        raw = parts[0] == "raw"
        if raw:
            parts = parts[1:]
        if len(parts) != 2 or not re.fullmatch(r"[A-Za-z_]\w*", parts[1]):
            raise ValueError(f"Invalid parameter: {p!r}")  # as CuPy's ParameterInfo
        t, name = parts
        if not (t[0].isupper() or t in _CTYPE):
            raise ValueError(f"Invalid type: {t!r}")
        if t in _CTYPE and _CTYPE[t] is None:
            raise NotImplementedError(f"stand-in ElementwiseKernel: type {t} is not modeled")
        if name == "i" or name == "n" or name.startswith("_"):
            raise ValueError(f"{name} is reserved")  # n, i and names starting with _ are CuPy's
        out.append((t, name, raw, is_input))
    return out


class ElementwiseKernel:
    """Stand-in for ``cupy.ElementwiseKernel``; see the module's docstring for what is modeled.

    Parameters
    ----------
    in_params, out_params : str
        Comma-separated ``[raw] type name``.
    operation : str
        The loop body, CUDA C++.
    name : str
        The kernel's name (the C++ function is ``name``).
    """

    def __init__(self, in_params: str, out_params: str, operation: str, name: str = "kernel", **kwargs):
        if kwargs:
            raise NotImplementedError(f"stand-in ElementwiseKernel: {sorted(kwargs)} are not modeled")
        self.ins, self.outs = _params(in_params, True), _params(out_params, False)
        self.operation, self.name = operation, name
        self._sigs: dict = {}

    def _source(self, ctypes_of: dict, shape_args) -> str:
        lines = [_PRELUDE]
        for t, c in ctypes_of.items():
            lines.append(f"typedef {c} {t};")
        lines.append(f'extern "C" void {self.name}(void** _args, const ptrdiff_t* _sizes, ptrdiff_t _n) {{')
        body = []
        for k, (t, name, raw, is_input) in enumerate(self.ins + self.outs):
            ct = t if t[0].isupper() else _CTYPE[t]
            const = "const " if is_input else ""
            if shape_args[k] == "scalar":
                lines.append(f"  const {ct} {name} = *({ct}*)_args[{k}];")
            elif raw:
                lines.append(f"  CArray<{const}{ct}> {name}{{({const}{ct}*)_args[{k}], _sizes[{k}]}};")
            else:
                lines.append(f"  {const}{ct}* _raw_{name} = ({const}{ct}*)_args[{k}];")
                body.append(f"    {const}{ct}& {name} = _raw_{name}[i];")
        lines.append("  CIndexer _ind{_n};")
        lines.append("  for (ptrdiff_t i = 0; i < _n; ++i) {")
        lines += body
        lines.append("    " + self.operation.strip())
        lines.append("    ;\n  }\n}")
        return "\n".join(lines) + "\n"

    @_replayable
    def __call__(self, *args):
        from cupy import _core, _standin

        params = self.ins + self.outs
        if len(args) not in (len(self.ins), len(params)):
            raise TypeError(f"Wrong number of arguments for {self.name!r}")
        for a in args:
            if not isinstance(a, _core.ndarray) and not _core._is_scalar(a):
                raise _core._unsupported(a)
        types: dict[str, numpy.dtype] = {}
        for (t, _, _, _), a in zip(params, args, strict=False):
            if isinstance(a, _core.ndarray) and t[0].isupper():
                if types.setdefault(t, a.dtype) != a.dtype:
                    raise TypeError(f"Type is mismatched. {t} {types[t]} {a.dtype}")  # CuPy's message
        for (t, name, _, _), a in zip(params, args, strict=False):
            if not isinstance(a, _core.ndarray) and t[0].isupper() and t not in types:
                raise TypeError(f"Cannot determine the type of {name}")
        loop = [a for (_, _, raw, _), a in zip(params, args, strict=False) if isinstance(a, _core.ndarray) and not raw]
        shape = numpy.broadcast_shapes(*[a.shape for a in loop]) if loop else ()
        outs = list(args[len(self.ins):])
        if not outs:
            for t, name, raw, _ in self.outs:
                if raw:
                    raise ValueError(f"Output array size is Undecided: raw output {name} must be given")
                outs.append(_core.ndarray(shape, types[t] if t[0].isupper() else numpy.dtype(t)))
        for o in outs:
            if not isinstance(o, _core.ndarray):
                raise TypeError("Output arguments must be cupy.ndarray")
        allargs = list(args[: len(self.ins)]) + outs
        ctypes_of = {}
        for t, dt in types.items():
            c = _CTYPE.get(numpy.dtype(dt).name)
            if c is None:
                raise NotImplementedError(f"stand-in ElementwiseKernel: dtype {dt} is not modeled")
            ctypes_of[t] = c
        kinds = tuple("scalar" if not isinstance(a, _core.ndarray) else "array" for a in allargs)
        key = (tuple(sorted(ctypes_of.items())), kinds)
        lib = self._sigs.get(key)
        if lib is None:
            _standin.check_nvrtc()  # CuPy compiles at the first call of each signature
            lib = self._sigs[key] = _build(self._source(ctypes_of, kinds))
        arrays = [a for a in allargs if isinstance(a, _core.ndarray)]
        _core._begin(arrays)
        n = int(numpy.prod(shape))
        bufs, keep, sizes = [], [], []
        for (t, _, raw, is_input), a in zip(params, allargs, strict=True):
            dt = types[t] if t[0].isupper() else numpy.dtype(t)
            if isinstance(a, _core.ndarray):
                if numpy.dtype(a.dtype) != dt:
                    raise TypeError(f"Type is mismatched. {t} {dt} {a.dtype}")
                if raw or not is_input:
                    if not raw and a.shape != shape:
                        raise ValueError(f"Out shape is mismatched: {a.shape} for {shape}")
                    host = a._f
                else:
                    host = numpy.broadcast_to(a._f, shape)
                buf = numpy.ascontiguousarray(host)  # a copy where not contiguous: written back below
                sizes.append(buf.size)
            else:
                buf = numpy.array(a, dtype=dt)  # a scalar takes its parameter's type
                sizes.append(1)
            keep.append((a, buf, raw, is_input))
            bufs.append(ctypes.c_void_p(buf.ctypes.data))
        argv = (ctypes.c_void_p * len(bufs))(*bufs)
        sz = (ctypes.c_ssize_t * len(sizes))(*sizes)
        getattr(lib, self.name)(argv, sz, ctypes.c_ssize_t(n))
        for a, buf, _raw, is_input in keep:
            if not is_input and isinstance(a, _core.ndarray) and buf.ctypes.data != a._f.ctypes.data:
                a._f[...] = buf.reshape(a._f.shape)
        _core._end(outs)
        return outs[0] if len(outs) == 1 else tuple(outs)
