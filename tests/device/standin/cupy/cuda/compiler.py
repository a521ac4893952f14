"""Stand-in for ``cupy.cuda.compiler``: the exception a kernel that does not compile raises."""

from cupy._kernel import CompileException  # noqa: F401
