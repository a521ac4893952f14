"""What a model can do beyond the model protocol's core (``hpcgpu/nn/_protocol.py``), as the model declares it.

A module of its own, below the protocol and the models that declare their capabilities, so that the protocol
can bind the models without an import cycle.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Capabilities", "BUILT_IN", "OWN"]


@dataclass(frozen=True)
class Capabilities:
    """What a model can do beyond the protocol's core, declared by the model and read by the trainer.

    Attributes
    ----------
    tensor_parallel : bool
        Its layers can be split over a tensor-parallel group (Megatron-LM's column and row split).
    mixed_precision : bool
        It computes in a 16-bit type (``bf16-mixed``, ``16-mixed``) on float32 master weights.
    cuda_graphs : bool
        Its step (forward, backward, update) can be captured in a CUDA graph and replayed.
    gemm_plan : bool
        Its GEMMs are known by shape, so the host BLAS threads of each can be planned by timing
        (``hpcgpu.train.gemm_threads``).
    task_from_data : bool
        It takes its task (classification or regression) from the data's labels; otherwise its loss fixes it.
    """

    tensor_parallel: bool = False
    mixed_precision: bool = False
    cuda_graphs: bool = False
    gemm_plan: bool = False
    task_from_data: bool = True


BUILT_IN = Capabilities(tensor_parallel=True, mixed_precision=True, cuda_graphs=True, gemm_plan=True,
                        task_from_data=False)
"""The built-in Dense layers: everything."""

OWN = Capabilities()
"""A model of one's own: its code is the user's, so none of the optional capabilities."""
