"""``NeuralNetClassifier``: a Sequential network as a scikit-learn estimator."""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from xpml._backend import to_numpy
from xpml._typing import Array, ArrayLike, Self
from xpml.base import BaseEstimator, ClassifierMixin, clone
from xpml.nn.layers import Dense, ReLU
from xpml.nn.sequential import Sequential
from xpml.utils._param_validation import Interval, Options
from xpml.utils._tree import tree_map, tree_update
from xpml.utils.validation import check_random_state, decode_labels

__all__ = ["NeuralNetClassifier"]


def _check_not_continuous(y):
    """Refuse real-valued targets (a regression problem) before encoding labels."""
    if y is None:
        return
    try:
        host = np.asarray(to_numpy(y))
    except Exception:  # labels that are not an array: let encode_labels judge them
        return
    if (
        host.dtype.kind == "f"
        and np.all(np.isfinite(host))
        and np.any(host != np.round(host))
    ):
        raise ValueError(
            "Unknown label type: continuous. NeuralNetClassifier needs class "
            "labels in y; got real values with fractional parts"
        )


def _check_layer_sizes(sizes):
    bad = [h for h in sizes if isinstance(h, bool) or not isinstance(h, int) or h < 1]
    if bad:
        raise ValueError(
            f"hidden_layer_sizes must hold ints >= 1 (units per hidden layer); "
            f"got {tuple(sizes)!r}"
        )


class NeuralNetClassifier(ClassifierMixin, BaseEstimator):
    """A feed-forward or convolutional network classifier usable in pipelines.

    Parameters
    ----------
    layers : list of layers, optional
        The network, ending in a layer with one output per class (logits; no
        Softmax layer), or one output with ``loss="logistic"``. The layers are
        cloned (unbuilt) at every ``fit``. Default: ``Dense(h) → ReLU`` for each
        ``h`` in ``hidden_layer_sizes``, then the output layer.
    hidden_layer_sizes : tuple of int, default=(64,)
        Widths of the default network (ignored when ``layers`` is given).
    input_shape : tuple of int, optional
        Each row of ``X`` is reshaped to this shape before the network, e.g.
        ``(8, 8, 1)`` for 8×8 grey images in NHWC order. 4-D ``X`` is also accepted.
    loss : {"cross_entropy", "logistic"}, default="cross_entropy"
        Softmax cross-entropy, or binary logistic loss (two classes only).
    optimizer : {"adam", "sgd", "momentum"}, default="adam"
    learning_rate : float, default=1e-3
    epochs : int, default=20
    batch_size : int, default=32
    shuffle : bool, default=True
    validation_fraction : float in (0, 1), optional
        Hold out this fraction of the training data, evaluate it every epoch.
    patience : int, optional
        Early stopping on the validation loss (training loss without a hold-out).
    random_state : int, Generator or None
        Seeds initial weights, shuffling and the hold-out split.
    verbose : bool, default=False
        tqdm progress bar over the epochs.

    Attributes
    ----------
    classes_ : array (k,)
    model_ : Sequential
        The trained network (its arrays in the caller's library).
    history_ : dict of lists
        Learning curve: ``"loss"`` per epoch, and ``"val_loss"``, ``"val_accuracy"``.
    loss_curve_ : list of float
    n_iter_ : int
        Epochs run.
    n_features_in_ : int

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.preprocessing import StandardScaler
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = make_pipeline(StandardScaler(), NeuralNetClassifier(
    ...     hidden_layer_sizes=(16,), learning_rate=0.01, epochs=50, random_state=0))
    >>> clf.fit(X, y).score(X, y) > 0.95
    True
    """

    _parameter_constraints = {
        "batch_size": [Interval(Integral, 1, None)],
        "epochs": [Interval(Integral, 1, None)],
        "hidden_layer_sizes": [tuple, list],
        "input_shape": [None, tuple, list],
        "layers": [None, list, tuple],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "loss": [Options("cross_entropy", "logistic")],
        "optimizer": [Options("adam", "sgd", "momentum")],
        "patience": [None, Interval(Integral, 1, None)],
        "random_state": ["random_state"],
        "shuffle": ["boolean"],
        "validation_fraction": [None, Interval(Real, 0, 1, closed="neither")],
        "verbose": ["boolean"],
    }
    _xpml_tags = {
        "test_params": {
            "hidden_layer_sizes": (16,),
            "learning_rate": 0.02,
            "epochs": 25,
            "batch_size": 16,
            "random_state": 0,
        },
    }

    def __init__(
        self,
        layers=None,
        *,
        hidden_layer_sizes=(64,),
        input_shape=None,
        loss="cross_entropy",
        optimizer="adam",
        learning_rate=1e-3,
        epochs=20,
        batch_size=32,
        shuffle=True,
        validation_fraction=None,
        patience=None,
        random_state=None,
        verbose=False,
    ):
        self.layers = layers
        self.hidden_layer_sizes = hidden_layer_sizes
        self.input_shape = input_shape
        self.loss = loss
        self.optimizer = optimizer
        self.learning_rate = learning_rate
        self.epochs = epochs
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.validation_fraction = validation_fraction
        self.patience = patience
        self.random_state = random_state
        self.verbose = verbose

    def _network(self, n_classes):
        if self.layers is not None:
            return [clone(layer) for layer in self.layers]
        out = 1 if self.loss == "logistic" else n_classes
        layers = []
        for h in self.hidden_layer_sizes:
            layers += [Dense(int(h)), ReLU()]
        return layers + [Dense(out, init="xavier")]

    def _reshape(self, X, xp):
        if self.input_shape is None or len(X.shape) != 2:
            return X
        shape = tuple(int(s) for s in self.input_shape)
        if math.prod(shape) != int(X.shape[1]):
            raise ValueError(
                f"input_shape={self.input_shape!r} has {math.prod(shape)} entries "
                f"but X has {X.shape[1]} features per row"
            )
        return xp.reshape(X, (X.shape[0],) + shape)

    def fit(self, X: ArrayLike, y: ArrayLike) -> Self:
        """Train the network; returns self."""
        _check_not_continuous(y)
        _check_layer_sizes(self.hidden_layer_sizes)
        ctx, X, y, _ = self._validate_fit_data(X, y, target="classes", x_ndim=(2, 4))
        xp = ctx.xp
        k = int(self.classes_.shape[0])
        if self.loss == "logistic" and k != 2:
            raise ValueError(
                f"loss='logistic' needs exactly 2 classes; y has {k} classes. "
                f"Use loss='cross_entropy'."
            )
        X = self._reshape(X, xp)
        if self.random_state is None or isinstance(self.random_state, Integral):
            seed = self.random_state
        else:
            seed = int(check_random_state(self.random_state).integers(2**31 - 1))
        if seed is None:
            seed = int(check_random_state(None).integers(2**31 - 1))
        validation = None
        if self.validation_fraction is not None:
            n = int(X.shape[0])
            n_val = max(1, int(round(self.validation_fraction * n)))
            if n_val >= n:
                raise ValueError(
                    f"validation_fraction={self.validation_fraction} leaves no "
                    f"training samples out of {n}"
                )
            order = xp.asarray(
                check_random_state(seed + 1).permutation(n), device=ctx.device
            )
            val, train = order[:n_val], order[n_val:]
            validation = (xp.take(X, val, axis=0), xp.take(y, val))
            X, y = xp.take(X, train, axis=0), xp.take(y, train)
        model = Sequential(
            self._network(k),
            loss=self.loss,
            optimizer=self.optimizer,
            learning_rate=self.learning_rate,
            random_state=seed,
        )
        model.fit(
            X,
            y,
            epochs=self.epochs,
            batch_size=self.batch_size,
            shuffle=self.shuffle,
            validation_data=validation,
            patience=self.patience,
            verbose=self.verbose,
        )
        if ctx.on_backend:
            for obj in model.layers:
                tree_update(obj, ctx.out)
            model.opt_state_ = tree_map(ctx.out, model.opt_state_)
        self.model_ = model
        self.history_ = model.history
        self.loss_curve_ = list(model.history["loss"])
        self.n_iter_ = model.n_epochs_
        return self._fitted(ctx)

    def _logits(self, X, ctx, batch_size=2048):
        xp = ctx.xp
        X = self._reshape(X, xp)
        model = tree_map(
            ctx.take, self.model_
        )  # a copy: predicting changes nothing here
        model.eval()
        n = int(X.shape[0])
        parts = [
            model.forward(X[i : min(i + batch_size, n), ...])
            for i in range(0, n, batch_size)
        ]
        return parts[0] if len(parts) == 1 else xp.concat(parts, axis=0)

    def predict_proba(self, X: ArrayLike) -> Array:
        """Class probabilities ``(n, k)``, in the caller's library."""
        ctx, X = self._validate_predict_data(X, x_ndim=(2, 4))
        return ctx.out(self.model_.loss_.proba(self._logits(X, ctx), xp=ctx.xp))

    def predict(self, X: ArrayLike) -> Array:
        """Predicted class labels."""
        ctx, X = self._validate_predict_data(X, x_ndim=(2, 4))
        Z = self._logits(X, ctx)
        xp = ctx.xp
        if self.loss == "logistic":
            codes = xp.astype(xp.reshape(Z, (-1,)) > 0, xp.int64)
        else:
            codes = xp.argmax(Z, axis=1)
        return decode_labels(self.classes_, codes, ctx)
