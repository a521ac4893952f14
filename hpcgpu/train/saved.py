"""A trained model back in Python: :func:`load_model` (Keras's), the built-in layers a results file describes."""

from __future__ import annotations

import os

from mpi4py import MPI

from ..errors import agree_call
from ..nn import relu_stack
from ..runtime import Runtime
from .trainer import Trainer

__all__ = ["load_model"]


def load_model(path: str, *, runtime: Runtime | None = None, what: str = "load_model", **options) -> Trainer:
    """A :class:`Trainer` holding the built-in model a results file describes, with its trained parameters. Collective.

    Keras's ``load_model``: the layers and loss come from the file's
    ``model`` attribute, the parameters from its ``/model`` group
    (:meth:`Trainer.load_weights`), the dtype from its ``config``; then
    ``predict`` and ``evaluate`` run as on the trainer that wrote it, at any
    number of ranks. A model of one's own is rebuilt by the code that
    defines it, then ``Trainer.load_weights(path)``.

    Parameters
    ----------
    path : str
        A results file (``save_results``, the command line's ``--out``).
    runtime : hpcgpu.Runtime, optional
        As for :class:`Trainer`.
    what : str
        How error messages name the file (the command line says ``--model``).
    **options
        :class:`TrainConfig` fields for the new trainer (``device``,
        ``batch_size``, ``progress`` ...); ``dtype`` defaults to the file's.

    Returns
    -------
    Trainer

    Raises
    ------
    FileNotFoundError, ValueError
        Every rank: no such file, not a results file, a model description
        that is not a JSON object or lacks a part (its ``loss``), weights that
        hold NaN or inf (the line names the dataset), a model of one's own
        (the line says what to do instead).
    """
    from ..nn import SoftmaxCrossEntropy, from_spec, loss_from_spec
    from .output import read_model

    comm = runtime.comm if runtime is not None else MPI.COMM_WORLD

    def described():
        """The file's layers, loss and options; a description that is not one is a ValueError naming the file."""
        spec, params, config = read_model(os.fspath(path), what)
        try:
            if spec.get("mlp"):  # a results file from before models were recorded: the command line's MLP
                sizes = [params["fc0.weight"].shape[0]] + [params[f"fc{i}.bias"].shape[0]
                                                           for i in range(len(params) // 2)]
                return relu_stack(sizes), SoftmaxCrossEntropy(), config
            return from_spec(spec["net"]), loss_from_spec(spec["loss"]), config
        except KeyError as e:
            raise ValueError(f"{what} {path}: its model description has no {e.args[0]!r}: the file was not written "
                             "by python -m hpcgpu.train, or was changed since") from None
        except (TypeError, ValueError, AttributeError, IndexError) as e:
            raise ValueError(f"{what} {path}: its model description is not one of hpcgpu's layers and loss "
                             f"({e})") from None

    net, loss, config = agree_call(described, catch=(ValueError, OSError), comm=comm)
    options = {"dtype": config.get("dtype", "float32"), "progress": "none", **options}
    trainer = Trainer(net, loss, runtime=runtime, **options)
    trainer._release_stop()  # a model to predict with: Ctrl-C keeps its usual meaning until a fit
    trainer._state.load_weights(path, what)
    return trainer
