"""Models for the trainer: layers that carry their own backward pass, losses, and a model of one's own.

Two ways in:

- the built-in layers, ``Sequential(Dense(64, 128, activation="relu"), Dense(128, 10))`` with a loss
  (:class:`SoftmaxCrossEntropy`, :class:`MeanSquaredError`, :class:`Huber`): the trainer runs them as a
  :class:`Network` (fused kernels on a GPU, CUDA graphs, tensor parallelism, mixed precision);
- a model of your own (:class:`Model`): ``init(rng)``, ``loss_and_grad(params, x, y)`` returning the SUM of
  per-sample losses and its gradient, ``predict(params, x)``; check its gradient with :func:`check_grad`.

The trainer drives both through one protocol: :func:`plan_model` gives a :class:`ModelPlan` (size, layout,
:class:`Capabilities`), whose ``bind`` gives a :class:`TrainModel` on the trainer's flat buffers. Another
framework's model is one more implementation of the two.
"""

from ._layers import (ACTIVATIONS, GELU, Activation, Dense, Dropout, Flatten, Layer, ReLU, Sequential, Standardize,
                      Tanh, from_spec, uniform_block)
from ._losses import LOSSES, Huber, Loss, MeanSquaredError, SoftmaxCrossEntropy, loss_by_name, loss_from_spec
from ._model import FlatModel, Model
from ._capabilities import Capabilities
from ._protocol import ModelPlan, TrainModel, array_module, awaits_data, check_grad, plan_error, plan_model
from ._network import MLP, Network, layer_plan, local_layout, relu_stack
from ._autograd import Jax, Keras, Torch

__all__ = ["ACTIVATIONS", "Activation", "Dense", "Dropout", "Flatten", "GELU", "Layer", "ReLU", "Sequential",
           "Standardize", "Tanh", "from_spec",
           "LOSSES", "Huber", "Loss", "MeanSquaredError", "SoftmaxCrossEntropy", "loss_by_name", "loss_from_spec",
           "FlatModel", "Model", "array_module", "check_grad", "Capabilities", "ModelPlan", "TrainModel",
           "awaits_data", "plan_model", "plan_error",
           "MLP", "Network", "layer_plan", "local_layout", "relu_stack", "uniform_block", "Torch", "Jax", "Keras"]
