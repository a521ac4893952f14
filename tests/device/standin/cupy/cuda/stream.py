"""Stand-in for ``cupy.cuda.stream``: streams, events, the current stream.

A stream's kernels reach the memory that MPI and host reads see only when the
stream is synchronized (or an event recorded after them, or the device).
"""

from __future__ import annotations

import itertools
import time
import weakref

from cupy import _standin
from cupy._standin import CUDARuntimeError

__all__ = ["Stream", "Event", "get_current_stream", "get_elapsed_time"]

_uids = itertools.count(16)
_by_ptr: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_events: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def event_of_ptr(ptr: int) -> Event:
    """The live event whose pointer is ``ptr``.

    Raises
    ------
    CUDARuntimeError
        ``cudaErrorInvalidResourceHandle``.
    """
    e = _events.get(ptr)
    if e is None:
        raise CUDARuntimeError(400)
    return e


def stream_of_ptr(ptr: int) -> Stream:
    """The stream whose pointer is ``ptr`` (0 or 1: the legacy null stream, 2: the per-thread one).

    Parameters
    ----------
    ptr : int

    Returns
    -------
    Stream

    Raises
    ------
    CUDARuntimeError
        ``cudaErrorInvalidResourceHandle`` for a pointer of no live stream.
    """
    if ptr in (0, 1):
        return Stream.null
    if ptr == 2:
        return Stream.ptds
    s = _by_ptr.get(ptr)
    if s is None:
        raise CUDARuntimeError(400)
    return s


class Stream:
    """A CUDA stream.

    Parameters
    ----------
    null : bool
        The legacy default stream (use :attr:`Stream.null` instead).
    non_blocking : bool
        No implicit ordering with the legacy default stream.
    ptds : bool
        The per-thread default stream.

    Notes
    -----
    ``with stream:`` makes it the current stream of the current device.
    """

    null: Stream

    def __init__(self, null: bool = False, non_blocking: bool = False, ptds: bool = False):
        self._blocking = not non_blocking
        self._device = None  # the null and per-thread streams act on the current device
        if null:
            self._uid, self.ptr = _standin.NULL_UID, 0
        elif ptds:
            self._uid, self.ptr = 2, 2
        else:
            self._device = _standin.ensure_context()
            self._uid = next(_uids)
            self.ptr = 0x7E000000 + 0x100 * self._uid
            _by_ptr[self.ptr] = self
        self._prev: list = []

    @property
    def device_id(self) -> int:
        """Device of the stream (the current one for the null stream)."""
        return _standin.current_device() if self._device is None else self._device

    def _queue(self) -> _standin.Queue:
        return _standin.queue(self._uid, self.device_id, self._blocking)

    def __enter__(self):
        stack = _standin.current_stream_stack()
        self._prev.append(len(stack))
        stack.append(self)
        return self

    def __exit__(self, *exc):
        stack = _standin.current_stream_stack()
        del stack[self._prev.pop():]
        return False

    def use(self) -> Stream:
        """Make this the current stream of the current device (no restore).

        Returns
        -------
        Stream
        """
        stack = _standin.current_stream_stack()
        stack[:] = [self]
        return self

    def synchronize(self) -> None:
        """Wait for the stream: its kernels land (become visible to MPI and host reads)."""
        _standin.ensure_context(self.device_id)
        if _standin.capture_of(self) is not None:
            _standin.invalidate_captures(self.device_id)
        _standin.count("host_syncs")
        self._queue().land()

    @property
    def done(self) -> bool:
        """Query the stream. The stand-in's GPU finishes when asked: lands and returns True."""
        self.synchronize()
        return True

    def record(self, event: Event | None = None) -> Event:
        """Record an event on this stream.

        Parameters
        ----------
        event : Event, optional

        Returns
        -------
        Event
        """
        if event is None:
            event = Event()
        event.record(self)
        return event

    def wait_event(self, event: Event) -> None:
        """Later work of this stream waits for ``event``; syncing this stream also lands it.

        Parameters
        ----------
        event : Event
        """
        if not event._recorded:
            return  # cudaStreamWaitEvent on a never-recorded event is a no-op
        self._queue().add(event._entries)

    def begin_capture(self, mode=None) -> None:
        """Begin capturing this stream's work into a CUDA graph (``cudaStreamBeginCapture``).

        Parameters
        ----------
        mode : int, optional
            Accepted and ignored (CuPy's default is the relaxed mode).

        Raises
        ------
        RuntimeError
            On the legacy default stream, as CuPy.
        """
        if self.ptr in (0, 1):
            raise RuntimeError("cannot capture on the default (legacy) stream")
        _standin.begin_capture(self)

    def end_capture(self):
        """End the capture: the captured work as a graph, not run (``cudaStreamEndCapture``).

        Returns
        -------
        cupy.cuda.graph.Graph

        Raises
        ------
        CUDARuntimeError
            ``cudaErrorStreamCaptureInvalidated`` after a forbidden call
            during the capture (a synchronization).
        """
        from cupy.cuda.graph import Graph

        return Graph._from_records(_standin.end_capture(self))

    def is_capturing(self) -> bool:
        """Whether the stream is capturing.

        Returns
        -------
        bool
        """
        return _standin.capture_of(self) is not None

    def __repr__(self):
        return f"<Stream {self.ptr:#x} (device {self._device})>"


Stream.null = Stream(null=True)
Stream.ptds = Stream(ptds=True)


def get_current_stream(device_id: int | None = None) -> Stream:
    """The current stream of ``device_id`` (the current device by default).

    Parameters
    ----------
    device_id : int, optional

    Returns
    -------
    Stream
    """
    stack = _standin.current_stream_stack(device_id)
    return stack[-1] if stack else Stream.null


class Event:
    """A CUDA event.

    Parameters
    ----------
    block, disable_timing, interprocess : bool
        As CuPy's; ``disable_timing`` makes :func:`get_elapsed_time` fail.
    """

    def __init__(self, block: bool = False, disable_timing: bool = False, interprocess: bool = False):
        _standin.ensure_context()
        self.disable_timing = disable_timing
        self._recorded = False
        self._entries: list = []
        self._time = None
        self._queue: weakref.ref | None = None
        self._syncs = 0
        self._complete = False
        self.ptr = id(self)
        _events[self.ptr] = self

    def record(self, stream: Stream | None = None) -> None:
        """Capture the work queued so far on ``stream`` (the current one by default).

        Parameters
        ----------
        stream : Stream, optional
        """
        if stream is None:
            stream = get_current_stream()
        q = stream._queue()
        self._entries = list(q.pending)
        self._queue = weakref.ref(q)
        self._syncs = q.syncs
        self._seq, q.records = q.records, q.records + 1
        self._complete = not self._entries
        self._recorded = True
        self._time = time.perf_counter()

    def _is_complete(self) -> bool:
        if self._complete:
            return True
        q = self._queue() if self._queue is not None else None
        return q is not None and (q.syncs > self._syncs or q.done_record >= self._seq)

    def synchronize(self) -> None:
        """Wait for the event: the work recorded before it lands."""
        _standin.count("host_syncs")
        for ref, wid in self._entries:
            alloc = ref()
            if alloc is not None:
                alloc.land(wid)
        self._complete = True
        q = self._queue() if self._queue is not None else None
        if q is not None:  # as on a GPU: the events recorded before it on its stream are complete as well
            q.done_record = max(q.done_record, self._seq)

    @property
    def done(self) -> bool:
        """Query the event. The stand-in's GPU finishes when asked: lands and returns True."""
        self.synchronize()
        return True


def get_elapsed_time(start_event: Event, end_event: Event) -> float:
    """Milliseconds between two completed events (host clock at record).

    Parameters
    ----------
    start_event, end_event : Event

    Returns
    -------
    float

    Raises
    ------
    CUDARuntimeError
        ``cudaErrorInvalidResourceHandle`` for an unrecorded or non-timing
        event, ``cudaErrorNotReady`` when ``end_event`` was not waited for.
    """
    for e in (start_event, end_event):
        if not e._recorded or e.disable_timing:
            raise CUDARuntimeError(400)
    for e in (start_event, end_event):
        if not e._is_complete():
            raise CUDARuntimeError(600)
    return (end_event._time - start_event._time) * 1000.0
