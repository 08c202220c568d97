"""A stack of layers trained by minibatch gradient descent.

``Sequential`` is the Keras-style model: it owns its layers, a loss and an
optimiser; ``fit`` shuffles every epoch, runs forward, loss, backward and an
optimiser step per minibatch, records the learning curve in ``history`` and can
stop early on a validation loss. For scikit-learn pipelines use
:class:`xpml.nn.NeuralNetClassifier`.
"""

from __future__ import annotations

import numbers

from xpml._backend import enter
from xpml._typing import Array, ArrayLike, Self
from xpml.base import Persistable
from xpml.nn.losses import LogisticLoss, MSELoss, get_loss
from xpml.nn.optim import get_optimiser
from xpml.utils._tree import tree_map, tree_update
from xpml.utils.validation import check_array, check_random_state

__all__ = ["Sequential"]


def _progress(epochs, verbose):
    """Epoch iterator: a tqdm bar when verbose and tqdm is installed."""
    if verbose:
        try:
            from tqdm.auto import tqdm

            return tqdm(range(epochs), desc="epochs", leave=False)
        except ImportError:
            pass
    return range(epochs)


def _snapshot(layer):
    return {
        k: dict(v) if isinstance(v, dict) else v
        for k, v in vars(layer).items()
        if not k.startswith("_cache")
    }


def _drop_caches(obj):
    for k in [k for k in vars(obj) if k.startswith("_cache")]:
        delattr(obj, k)


def _check_fit_args(epochs, batch_size, patience):
    for name, v, lo in (("epochs", epochs, 1), ("batch_size", batch_size, 1)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < lo:
            raise ValueError(f"{name} must be an int >= {lo}; got {v!r}")
    if patience is not None and (
        not isinstance(patience, numbers.Integral) or patience < 1
    ):
        raise ValueError(f"patience must be None or an int >= 1; got {patience!r}")


class _EarlyStopping:
    """Stop after ``patience`` epochs without the monitored loss improving by
    ``min_delta``; remember the best weights to restore them."""

    def __init__(self, patience, min_delta):
        self.patience, self.min_delta = patience, min_delta
        self.best, self.best_state, self.waited = float("inf"), None, 0

    def should_stop(self, monitored, layers):
        if self.patience is None:
            return False
        if monitored < self.best - self.min_delta:
            self.best, self.waited = monitored, 0
            # arrays are replaced, never written into: references are a snapshot
            self.best_state = [_snapshot(layer) for layer in layers]
            return False
        self.waited += 1
        return self.waited >= self.patience

    def restore(self, layers):
        if self.best_state is not None:
            for layer, state in zip(layers, self.best_state):
                layer.__dict__.update(state)


class Sequential(Persistable):
    """Layers applied in order, with a loss and an optimiser.

    Parameters
    ----------
    layers : list of layers
        E.g. ``[Conv2D(8, 3), ReLU(), MaxPool2D(2), Flatten(), Dense(10)]``. With
        ``loss="cross_entropy"`` the last layer gives logits (no Softmax layer).
    loss : {"cross_entropy", "logistic", "mse"} or loss object, default="cross_entropy"
    optimizer : {"adam", "sgd", "momentum"} or optimiser object, default="adam"
    learning_rate : float, optional
        Used when ``optimizer`` is a name (default: the optimiser's own).
    random_state : int, Generator or None
        Seeds the weights (drawn on the host, so every backend gets the same
        network) and the shuffling.

    Attributes
    ----------
    history : dict of lists
        Per epoch: ``"loss"`` (mean training loss over the epoch's minibatches)
        and, with validation data, ``"val_loss"`` and ``"val_accuracy"``.
    optimizer_ : optimiser object (hyperparameters only).
    opt_state_ : dict
        The optimiser's explicit state (step count and slots), carried from one
        ``fit`` call to the next.
    loss_ : loss object.

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.nn import Dense, ReLU
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 2)); y = (X[:, 0] * X[:, 1] > 0).astype(int)
    >>> model = Sequential([Dense(16), ReLU(), Dense(2)], learning_rate=0.05, random_state=0)
    >>> model = model.fit(X, y, epochs=40, batch_size=20)
    >>> model.history["loss"][-1] < 0.3 < model.history["loss"][0]
    True
    >>> model.evaluate(X, y)["accuracy"] > 0.9
    True
    """

    def __init__(
        self,
        layers=None,
        *,
        loss="cross_entropy",
        optimizer="adam",
        learning_rate=None,
        random_state=None,
    ):
        self.layers = layers
        self.loss = loss
        self.optimizer = optimizer
        self.learning_rate = learning_rate
        self.random_state = random_state

    # ------------------------------------------------------------ structure
    def add(self, layer):
        """Append a layer; returns self."""
        if self.layers is None:
            self.layers = []
        self.layers.append(layer)
        return self

    def _layers(self):
        if not self.layers:
            raise ValueError(
                f"layers must be a non-empty list of layers; got {self.layers!r}"
            )
        return self.layers

    def train(self, mode=True):
        """Training mode for every layer (``mode=False``: evaluation); returns self."""
        for layer in self._layers():
            layer.train(mode)
        return self

    def eval(self):
        """Evaluation mode for every layer (BatchNorm uses running statistics)."""
        return self.train(False)

    def build(self, input_shape, *, xp, device=None, dtype=None, rng=None):
        """Create every layer's parameters for samples of ``input_shape``."""
        rng = check_random_state(self.random_state) if rng is None else rng
        shape = tuple(input_shape)
        for layer in self._layers():
            if not layer.built:
                own = getattr(layer, "random_state", None)
                layer.build(
                    shape,
                    xp=xp,
                    device=device,
                    dtype=dtype,
                    rng=rng if own is None else check_random_state(own),
                )
            shape = layer.output_shape(shape)
        return self

    def forward(self, X):
        """The network output (logits for the classification losses)."""
        for layer in self._layers():
            X = layer.forward(X)
        return X

    def backward(self, dY):
        """Back-propagate ``dY`` through every layer, filling their ``grads``."""
        for layer in reversed(self._layers()):
            dY = layer.backward(dY)
        return dY

    def _backward_params(self, dY):
        """:meth:`backward` as training needs it: every layer's ``grads``, and
        no input gradient below the first layer with parameters (that layer
        takes :meth:`~xpml.nn.Layer.backward_params`; the layers under it have
        nothing to learn). For a Conv2D first, this skips the ``dX`` pass over
        the input's windows, as PyTorch does for an input without
        ``requires_grad``."""
        layers = self._layers()
        first = next((i for i, lay in enumerate(layers) if lay._has_params), None)
        if first is None:
            return
        for layer in reversed(layers[first + 1 :]):
            dY = layer.backward(dY)
        layers[first].backward_params(dY)

    # ------------------------------------------------------------- training
    def _enter(self, X, y=None):
        ctx, (X, y) = enter(X, y, names=("X", "y"))
        X = check_array(X, xp=ctx.xp, name="X", ndim=(2, 3, 4), requested=ctx.dtype)
        for obj in self._layers():
            tree_update(obj, ctx.take)
        if getattr(self, "opt_state_", None) is not None:
            self.opt_state_ = tree_map(ctx.take, self.opt_state_)
        if y is not None:
            if int(y.shape[0]) != int(X.shape[0]):
                raise ValueError(
                    f"X and y have inconsistent numbers of samples: X has "
                    f"{X.shape[0]}, y has {y.shape[0]}"
                )
            if isinstance(get_loss(self.loss), MSELoss):
                y = ctx.xp.astype(y, X.dtype)
        return ctx, X, y

    def fit(
        self,
        X: ArrayLike,
        y: ArrayLike,
        *,
        epochs=10,
        batch_size=32,
        shuffle=True,
        validation_data=None,
        patience=None,
        min_delta=0.0,
        verbose=False,
    ) -> Self:
        """Train by minibatch gradient descent; returns self.

        Parameters
        ----------
        X : array (n, ...) ; NHWC images for convolutional networks
        y : array (n,)
            Class codes ``0..k-1`` (cross-entropy), ``{0, 1}`` (logistic) or
            targets (MSE).
        epochs : int
        batch_size : int
        shuffle : bool
            Reshuffle the samples before every epoch.
        validation_data : (X_val, y_val), optional
            Evaluated after every epoch (``history["val_loss"]``).
        patience : int, optional
            Early stopping: stop after ``patience`` epochs without the monitored
            loss (validation loss when given, else training loss) improving by
            ``min_delta``, and restore the best weights.
        verbose : bool
            A tqdm progress bar over the epochs (or one printed line per epoch
            when tqdm is not installed).
        """
        _check_fit_args(epochs, batch_size, patience)
        self.loss_ = get_loss(self.loss)
        if not hasattr(self, "optimizer_"):
            self.optimizer_ = get_optimiser(self.optimizer, self.learning_rate)
        ctx, X, y = self._enter(X, y)
        rng = check_random_state(self.random_state)
        self.build(
            tuple(X.shape[1:]), xp=ctx.xp, device=ctx.device, dtype=X.dtype, rng=rng
        )
        if getattr(self, "opt_state_", None) is None:
            self.opt_state_ = self.optimizer_.init([lay.params for lay in self.layers])
        history = {"loss": []}
        if validation_data is not None:
            history.update(val_loss=[], val_accuracy=[])
        stop = _EarlyStopping(patience, min_delta)
        bar = _progress(epochs, verbose)
        for epoch in bar:
            order = rng.permutation(int(X.shape[0])) if shuffle else None
            history["loss"].append(self._epoch(X, y, order, batch_size, ctx))
            monitored = history["loss"][-1]
            if validation_data is not None:
                scores = self.evaluate(*validation_data)
                history["val_loss"].append(scores["loss"])
                history["val_accuracy"].append(scores.get("accuracy", float("nan")))
                monitored = scores["loss"]
            self._report(bar, epoch, history, verbose)
            if stop.should_stop(monitored, self.layers):
                break
        stop.restore(self.layers)
        self.n_epochs_ = len(history["loss"])
        self.history = history
        for obj in self.layers + [self.loss_]:
            _drop_caches(obj)  # the last batch's windows are not worth keeping
        self.eval()
        return self

    def _epoch(self, X, y, order, batch_size, ctx):
        """One pass over the minibatches; the mean training loss (one sync)."""
        xp, n = ctx.xp, int(X.shape[0])
        idx = None if order is None else xp.asarray(order, device=ctx.device)
        self.train()
        total = 0.0
        for start in range(0, n, batch_size):
            stop = min(start + batch_size, n)
            if idx is None:
                Xb, yb = X[start:stop, ...], y[start:stop]
            else:
                Xb = xp.take(X, idx[start:stop], axis=0)
                yb = xp.take(y, idx[start:stop])
            loss = self.loss_.forward(self.forward(Xb), yb)
            self._backward_params(self.loss_.backward())
            self.opt_state_ = self.optimizer_.step(self.layers, self.opt_state_)
            total = total + loss * (stop - start)
        return float(total) / n  # one device sync per epoch

    @staticmethod
    def _report(bar, epoch, history, verbose):
        if not verbose:
            return
        last = {k: round(v[-1], 5) for k, v in history.items()}
        if hasattr(bar, "set_postfix"):
            bar.set_postfix(last)
        else:
            print(
                f"epoch {epoch + 1}: " + ", ".join(f"{k}={v}" for k, v in last.items())
            )

    # ------------------------------------------------------------ inference
    def _output(self, X):
        self.eval()
        return self.forward(X)

    def predict_proba(self, X: ArrayLike) -> Array:
        """Class probabilities ``(n, k)`` (softmax, or sigmoid for the logistic loss)."""
        ctx, X, _ = self._enter(X)
        loss = get_loss(self.loss)
        if not hasattr(loss, "proba"):
            raise ValueError(
                "predict_proba needs a classification loss "
                "('cross_entropy' or 'logistic'); this model uses 'mse'"
            )
        return ctx.out(loss.proba(self._output(X), xp=ctx.xp))

    def predict(self, X: ArrayLike) -> Array:
        """Class codes (classification losses) or the network output (MSE)."""
        ctx, X, _ = self._enter(X)
        return ctx.out(self._predict(self._output(X), ctx.xp))

    def _predict(self, Z, xp):
        loss = get_loss(self.loss)
        if isinstance(loss, MSELoss):
            return Z
        if isinstance(loss, LogisticLoss):
            return xp.astype(xp.reshape(Z, (-1,)) > 0, xp.int64)
        return xp.argmax(Z, axis=1)

    def evaluate(self, X, y, *, batch_size=1024):
        """``{"loss": mean loss, "accuracy": ...}`` (accuracy for classification
        losses) in evaluation mode, as Python floats."""
        ctx, X, y = self._enter(X, y)
        xp = ctx.xp
        loss = get_loss(self.loss)
        n = int(X.shape[0])
        total, correct = 0.0, 0.0
        for start in range(0, n, batch_size):
            stop = min(start + batch_size, n)
            Z = self._output(X[start:stop, ...])
            total = total + loss.forward(Z, y[start:stop]) * (stop - start)
            if not isinstance(loss, MSELoss):
                pred = self._predict(Z, xp)
                hit = pred == xp.astype(y[start:stop], pred.dtype)
                correct = correct + xp.sum(xp.astype(hit, Z.dtype))
        out = {"loss": float(total) / n}
        if not isinstance(loss, MSELoss):
            out["accuracy"] = float(correct) / n
        return out

    def __getstate__(self):
        return dict(self.__dict__)
