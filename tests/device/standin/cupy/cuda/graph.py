"""Stand-in for ``cupy.cuda.graph``: a CUDA graph made by stream capture, replayed by ``launch``."""

from __future__ import annotations

from cupy import _standin

__all__ = ["Graph"]


class Graph:
    """The work captured on a stream (:meth:`cupy.cuda.Stream.end_capture`), replayed by :meth:`launch`.

    As CuPy's, it cannot be made by the user. It holds no device memory: a
    replay that reaches an allocation freed since the capture raises
    ``cudaErrorIllegalAddress``.
    """

    def __init__(self, *args, **kwargs):
        raise NotImplementedError("currently this class cannot be initiated by the user and must be created via "
                                  "stream capture")

    @classmethod
    def _from_records(cls, records) -> Graph:
        g = cls.__new__(cls)
        g._records = records
        return g

    def launch(self, stream=None) -> None:
        """Run the captured work on ``stream`` (the current one by default): one launch.

        Parameters
        ----------
        stream : cupy.cuda.Stream, optional
        """
        from cupy.cuda import stream as _stream

        _standin.replay(self._records, _stream.get_current_stream() if stream is None else stream)

    def upload(self, stream=None) -> None:
        """``cudaGraphUpload``: nothing to do here.

        Parameters
        ----------
        stream : cupy.cuda.Stream, optional
        """
