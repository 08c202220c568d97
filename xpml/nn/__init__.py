"""Neural networks on the array API: layers, losses, optimisers, a Sequential model.

Every layer has ``forward(X)`` and ``backward(dY) -> dX`` with parameters in
``params`` and their gradients in ``grads``; convolution and pooling are
contractions over a window tensor (see :mod:`xpml.nn.conv`). The same network
trains on NumPy, CuPy, PyTorch or array-api-strict, and a seed gives the same
initial weights on all of them.

>>> import numpy as np
>>> from xpml.nn import Sequential, Conv2D, ReLU, MaxPool2D, Flatten, Dense
>>> net = Sequential([Conv2D(4, 3, padding=1), ReLU(), MaxPool2D(2), Flatten(), Dense(3)],
...                  random_state=0)
>>> X = np.random.default_rng(0).normal(size=(6, 8, 8, 1)); y = np.arange(6) % 3
>>> net.fit(X, y, epochs=2, batch_size=3).predict_proba(X).shape
(6, 3)
"""

from xpml.nn.classifier import NeuralNetClassifier
from xpml.nn.conv import AvgPool2D, Conv2D, MaxPool2D
from xpml.nn.init import he_normal, he_uniform, xavier_normal, xavier_uniform
from xpml.nn.layers import (
    BatchNorm1D,
    Dense,
    Flatten,
    Identity,
    ReLU,
    Sigmoid,
    Softmax,
    Tanh,
)
from xpml.nn.losses import LogisticLoss, MSELoss, SoftmaxCrossEntropy
from xpml.nn.optim import SGD, Adam, Momentum
from xpml.nn.sequential import Sequential

__all__ = [
    "Dense",
    "BatchNorm1D",
    "Conv2D",
    "MaxPool2D",
    "AvgPool2D",
    "Flatten",
    "ReLU",
    "Sigmoid",
    "Tanh",
    "Identity",
    "Softmax",
    "SoftmaxCrossEntropy",
    "LogisticLoss",
    "MSELoss",
    "SGD",
    "Momentum",
    "Adam",
    "he_normal",
    "he_uniform",
    "xavier_normal",
    "xavier_uniform",
    "Sequential",
    "NeuralNetClassifier",
]
