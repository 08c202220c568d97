"""Sequential training, optimisers, initialisers and the estimator wrapper; the digits CNN."""

from __future__ import annotations

import numpy as np
import pytest
from array_api_compat import array_namespace

import xpml
import xpml.nn.optim
from xpml._backend import to_numpy
from xpml.nn import (
    SGD,
    Adam,
    BatchNorm1D,
    Conv2D,
    Dense,
    Flatten,
    MaxPool2D,
    Momentum,
    NeuralNetClassifier,
    ReLU,
    Sequential,
    he_normal,
    xavier_uniform,
)

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """Many small torch ops on a shared 2-core machine: extra threads only spin."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).reshape(-1, 8, 8, 1)
    return train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)


def digits_cnn(seed=0):
    return Sequential(
        [Conv2D(16, 3, padding=1), ReLU(), MaxPool2D(2), Flatten(), Dense(10)],
        learning_rate=0.005,
        random_state=seed,
    )


EPOCHS = 20


@pytest.fixture(scope="module")
def numpy_run(digits):
    Xtr, Xte, ytr, yte = digits
    return digits_cnn().fit(Xtr, ytr, epochs=EPOCHS, batch_size=32)


def test_cnn_on_digits_reaches_97_percent(numpy_run, digits):
    _, Xte, _, yte = digits
    scores = numpy_run.evaluate(Xte, yte)
    assert scores["accuracy"] >= 0.97, scores
    curve = numpy_run.history["loss"]
    assert len(curve) == EPOCHS <= 30 and curve[-1] < 0.1 < curve[0]


def test_cnn_on_torch_gives_the_same_loss_curve(numpy_run, digits):
    Xtr, Xte, ytr, yte = digits
    model = digits_cnn().fit(
        torch.asarray(Xtr), torch.asarray(ytr), epochs=EPOCHS, batch_size=32
    )
    assert isinstance(model.layers[0].params["W"], torch.Tensor)
    np.testing.assert_allclose(
        model.history["loss"], numpy_run.history["loss"], rtol=1e-6
    )
    P = model.predict_proba(torch.asarray(Xte))
    assert isinstance(P, torch.Tensor)
    np.testing.assert_allclose(
        P.numpy(), numpy_run.predict_proba(Xte), rtol=1e-6, atol=1e-9
    )


def test_cnn_runs_on_array_api_strict(digits):
    xps = pytest.importorskip("array_api_strict")
    Xtr, _, ytr, _ = digits
    Xs, ys = Xtr[:200], ytr[:200]
    ref = digits_cnn().fit(Xs, ys, epochs=2, batch_size=50)
    model = digits_cnn().fit(xps.asarray(Xs), xps.asarray(ys), epochs=2, batch_size=50)
    np.testing.assert_allclose(model.history["loss"], ref.history["loss"], rtol=1e-10)
    pred = model.predict(xps.asarray(Xs))
    assert type(pred).__module__.startswith("array_api_strict")
    np.testing.assert_array_equal(np.asarray(pred), ref.predict(Xs))


# -------------------------------------------------------------- optimisers
@pytest.mark.parametrize(
    "ours,theirs",
    [
        (lambda: SGD(0.1), lambda p: torch.optim.SGD(p, lr=0.1)),
        (
            lambda: Momentum(0.05, momentum=0.8),
            lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8),
        ),
        (
            lambda: Adam(0.01, beta1=0.8, beta2=0.99, eps=1e-7),
            lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.8, 0.99), eps=1e-7),
        ),
    ],
    ids=["sgd", "momentum", "adam"],
)
def test_optimisers_match_torch(ours, theirs):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(16, 3)), rng.normal(size=(16, 2))
    model = Sequential(
        [Dense(4, random_state=0), ReLU(), Dense(2, random_state=1)],
        loss="mse",
        optimizer=ours(),
    )
    model.build((3,), xp=xpml._backend._namespace("numpy"))
    params = [
        torch.tensor(layer.params[k], requires_grad=True)
        for layer in model.layers
        for k in ("W", "b")
        if layer.params
    ]
    opt = theirs(params)
    state = None
    for _ in range(5):
        model.loss_ = xpml.nn.MSELoss()
        model.loss_.forward(model.forward(X), y)
        model.backward(model.loss_.backward())
        state = model.optimizer.step(model.layers, state)
        opt.zero_grad()
        W1, b1, W2, b2 = params
        out = torch.relu(torch.tensor(X) @ W1 + b1) @ W2 + b2
        torch.nn.functional.mse_loss(out, torch.tensor(y)).backward()
        opt.step()
    ours_ = [
        layer.params[k] for layer in model.layers for k in ("W", "b") if layer.params
    ]
    for a, b in zip(ours_, params):
        np.testing.assert_allclose(a, b.detach().numpy(), rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------ initialisers
def test_initialisers_are_seeded_and_scaled(xp):
    rng = np.random.default_rng(0)
    W = he_normal((500, 400), 500, 400, rng)
    assert abs(W.std() - np.sqrt(2 / 500)) < 0.01 * np.sqrt(2 / 500)
    U = xavier_uniform((300, 200), 300, 200, rng)
    a = np.sqrt(6 / 500)
    assert U.max() <= a and U.min() >= -a and abs(U.max() - a) < 0.01 * a
    X = np.ones((2, 6, 6, 3))
    ref = Conv2D(4, 3, random_state=7, init="xavier")
    ref.forward(X)
    other = Conv2D(4, 3, random_state=7, init="xavier")
    other.forward(xp.asarray(X))
    np.testing.assert_array_equal(xp.to_numpy(other.params["W"]), ref.params["W"])


# ---------------------------------------------------------- the Sequential
def test_batchnorm_train_and_eval_modes():
    rng = np.random.default_rng(0)
    X = rng.normal(loc=5.0, size=(64, 3))
    y = (X[:, 0] > 5.0).astype(int)
    model = Sequential(
        [Dense(8), BatchNorm1D(), ReLU(), Dense(2)], learning_rate=0.01, random_state=0
    )
    model.fit(X, y, epochs=5, batch_size=16)
    bn = model.layers[1]
    assert not bn.training  # fit ends in evaluation mode
    assert np.all(np.abs(bn.running_mean) > 0)  # statistics were tracked
    Y_eval = bn.forward(model.layers[0].forward(X))
    model.train()
    Y_train = bn.forward(model.layers[0].forward(X))
    np.testing.assert_allclose(Y_train.mean(axis=0), bn.params["beta"], atol=1e-10)
    assert not np.allclose(Y_eval, Y_train)


def test_early_stopping_restores_the_best_weights():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(60, 4)), rng.integers(0, 2, size=60)
    Xv, yv = (
        rng.normal(size=(30, 4)),
        rng.integers(0, 2, size=30),
    )  # pure noise: overfits
    model = Sequential(
        [Dense(64), ReLU(), Dense(2)], learning_rate=0.05, random_state=0
    )
    model.fit(X, y, epochs=200, batch_size=10, validation_data=(Xv, yv), patience=3)
    val = model.history["val_loss"]
    assert model.n_epochs_ < 200 and len(val) == model.n_epochs_
    assert model.evaluate(Xv, yv)["loss"] == pytest.approx(min(val), rel=1e-12)


def test_verbose_shows_progress(capsys):
    pytest.importorskip("tqdm")
    X, y = np.random.default_rng(0).normal(size=(20, 3)), np.arange(20) % 2
    Sequential([Dense(2)], random_state=0).fit(X, y, epochs=2, verbose=True)
    err = capsys.readouterr().err
    assert "epochs" in err  # tqdm writes its bar to stderr


def test_verbose_without_tqdm_prints_each_epoch(capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm now fails
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    X, y = np.random.default_rng(0).normal(size=(20, 3)), np.arange(20) % 2
    Sequential([Dense(2)], random_state=0).fit(X, y, epochs=2, verbose=True)
    out = capsys.readouterr().out
    assert "epoch 1: loss=" in out and "epoch 2: loss=" in out


def test_sequential_errors_name_the_argument():
    X, y = np.ones((4, 3)), np.array([0, 1, 0, 1])
    with pytest.raises(ValueError, match="epochs"):
        Sequential([Dense(2)]).fit(X, y, epochs=0)
    with pytest.raises(ValueError, match="loss must be"):
        Sequential([Dense(2)], loss="hinge").fit(X, y)
    with pytest.raises(ValueError, match="optimizer must be"):
        Sequential([Dense(2)], optimizer="rmsprop").fit(X, y)
    with pytest.raises(ValueError, match="layers must be"):
        Sequential([]).fit(X, y)
    with pytest.raises(ValueError, match="Flatten"):
        Sequential([Dense(2)]).fit(np.ones((4, 2, 2, 1)), y)


def test_save_and_load_a_trained_network(tmp_path, digits):
    Xtr, Xte, ytr, _ = digits
    model = digits_cnn().fit(Xtr[:100], ytr[:100], epochs=1)
    model.save(tmp_path / "cnn.xpml")
    again = xpml.load(tmp_path / "cnn.xpml")
    np.testing.assert_array_equal(again.predict_proba(Xte), model.predict_proba(Xte))
    again.fit(
        Xtr[:100], ytr[:100], epochs=1
    )  # training resumes with the optimiser state


# ------------------------------------------------------------- the wrapper
def test_classifier_in_a_pipeline_with_a_cnn(digits):
    from sklearn.base import clone
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    Xtr, Xte, ytr, yte = digits
    Xtr, Xte = Xtr.reshape(len(Xtr), -1) * 16, Xte.reshape(len(Xte), -1) * 16
    clf = NeuralNetClassifier(
        [Conv2D(8, 3, padding=1), ReLU(), MaxPool2D(2), Flatten(), Dense(10)],
        input_shape=(8, 8, 1),
        learning_rate=0.01,
        epochs=6,
        validation_fraction=0.1,
        patience=3,
        random_state=0,
    )
    pipe = make_pipeline(FunctionTransformer(lambda a: a / 16.0), clf)
    pipe.fit(Xtr, ytr)
    assert pipe.score(Xte, yte) > 0.93
    fitted = pipe[-1]
    assert fitted.n_iter_ == len(fitted.loss_curve_) == len(fitted.history_["val_loss"])
    assert not fitted.layers[0].params  # the template layers stay unbuilt
    assert clone(clf).get_params()["layers"][0] is not clf.layers[0]


def test_classifier_logistic_loss_and_labels():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 2))
    y = np.where(X[:, 0] + X[:, 1] > 0, "yes", "no")
    clf = NeuralNetClassifier(
        hidden_layer_sizes=(8,),
        loss="logistic",
        learning_rate=0.05,
        epochs=30,
        random_state=0,
    ).fit(X, y)
    assert clf.model_.layers[-1].params["W"].shape == (8, 1)
    assert clf.score(X, y) > 0.95
    assert set(clf.predict(X)) <= {"yes", "no"}
    np.testing.assert_allclose(clf.predict_proba(X).sum(axis=1), 1.0)
    with pytest.raises(ValueError, match="exactly 2 classes"):
        NeuralNetClassifier(loss="logistic").fit(X, np.arange(80) % 3)
    with pytest.raises(ValueError, match="input_shape"):
        NeuralNetClassifier(input_shape=(3, 3, 1)).fit(X, y)


def test_demo_prints_the_learning_curve(tmp_path, capsys):
    from xpml.demos import discover

    assert discover()["cnn"].main(["--epochs", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "final test accuracy" in out and "train loss" in out
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return  # the PNG is drawn only where matplotlib is installed
    assert (tmp_path / "cnn_learning_curve.png").exists()


def test_bench_suite_is_discovered():
    from xpml.bench import discover

    assert discover()["nn"].SUITE == "nn"


def test_mse_regression_recovers_a_linear_map():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.3
    model = Sequential(
        [Dense(1, init="xavier")],
        loss="mse",
        optimizer="sgd",
        learning_rate=0.1,
        random_state=0,
    )
    before = model.evaluate(X, y)["loss"]
    model.fit(X, y, epochs=50, batch_size=10)
    assert model.evaluate(X, y)["loss"] < 1e-10 < before
    np.testing.assert_allclose(
        model.layers[0].params["W"][:, 0], [1.0, -2.0, 0.5], rtol=1e-6
    )
    assert model.predict(X).shape == (100, 1)
    with pytest.raises(ValueError, match="predict_proba"):
        model.predict_proba(X)


@pytest.mark.parametrize("name", ["sgd", "momentum", "adam"])
def test_optimiser_state_is_explicit_data(name, xp):
    """``init`` / ``update`` are pure: inputs untouched, the state is returned,
    and two updates from the same state give the same result."""
    opt = xpml.nn.optim.get_optimiser(name, 0.1)
    params = [{"W": xp.asarray(np.ones((2, 2))), "b": xp.asarray(np.zeros(2))}, {}]
    grads = [{"W": xp.asarray(np.full((2, 2), 0.5)), "b": xp.asarray(np.ones(2))}, {}]
    state0 = opt.init(params)
    assert state0["t"] == 0 and not vars(opt).keys() - {"learning_rate"} - set(
        opt.get_params()
    )
    p1, s1 = opt.update(params, grads, state0)
    p1b, _ = opt.update(params, grads, state0)
    assert s1["t"] == 1 and state0["t"] == 0
    np.testing.assert_array_equal(to_numpy(params[0]["W"]), np.ones((2, 2)))
    np.testing.assert_array_equal(to_numpy(p1[0]["W"]), to_numpy(p1b[0]["W"]))
    p2, s2 = opt.update(p1, grads, s1)
    assert s2["t"] == 2
    # SGD: a fixed step; momentum and Adam: the second step differs from the first
    step1 = to_numpy(params[0]["W"]) - to_numpy(p1[0]["W"])
    step2 = to_numpy(p1[0]["W"]) - to_numpy(p2[0]["W"])
    assert np.allclose(step1, step2) is (name != "momentum")


def _nets():
    return {
        "conv first (stride 1)": (
            lambda: [
                Conv2D(4, 3, padding=1),
                ReLU(),
                MaxPool2D(2),
                Flatten(),
                Dense(3),
            ],
            (5, 6, 6, 2),
        ),
        "conv first (stride 2)": (
            lambda: [Conv2D(4, 3, stride=2, padding=1), ReLU(), Flatten(), Dense(3)],
            (5, 7, 7, 2),
        ),
        "flatten, then dense": (
            lambda: [Flatten(), Dense(6), ReLU(), BatchNorm1D(), Dense(3)],
            (5, 2, 3),
        ),
        "no parameters": (lambda: [Flatten(), ReLU()], (5, 2, 3)),
    }


@pytest.mark.parametrize("net_name", list(_nets()))
def test_training_backward_skips_only_the_unneeded_input_gradient(net_name, xp):
    """Training's backward (no input gradient below the first layer with
    parameters) fills every layer's grads as the full backward does, to
    rounding: the first layer's dW by itself rather than beside its dX."""
    make, shape = _nets()[net_name]
    rng = np.random.default_rng(0)
    X = xp.asarray(rng.standard_normal(shape))
    dZ = None
    grads = []
    for training_pass in (False, True):
        net = Sequential(make(), random_state=0)
        net.build(shape[1:], xp=array_namespace(X), dtype=X.dtype)  # same weights
        Z = net.forward(X)
        if dZ is None:
            dZ = xp.asarray(rng.standard_normal(tuple(Z.shape)))
        if training_pass:
            net._backward_params(dZ)
        else:
            net.backward(dZ)
        grads.append(
            [{k: to_numpy(v) for k, v in lay.grads.items()} for lay in net.layers]
        )
    full, training = grads
    assert [g.keys() for g in full] == [g.keys() for g in training]
    for a, b in zip(full, training, strict=True):
        for k in a:
            np.testing.assert_allclose(b[k], a[k], rtol=1e-10, atol=1e-12)
    if net_name != "no parameters":
        assert any(np.any(g[k] != 0) for g in training for k in g)


def test_the_first_conv_layer_computes_no_input_gradient(monkeypatch):
    """In fit, the first Conv2D's backward pass is its weight gradient alone."""
    from xpml.nn import conv as conv_module

    calls = {"dX": 0}
    real = conv_module.conv_backward_s1

    def counting(*args, **kw):
        calls["dX"] += 1
        return real(*args, **kw)

    monkeypatch.setattr(conv_module, "conv_backward_s1", counting)
    net = xpml.nn.Sequential(
        [
            xpml.nn.Conv2D(3, 3, padding=1),
            xpml.nn.ReLU(),
            xpml.nn.Conv2D(2, 3, padding=1),
            xpml.nn.Flatten(),
            xpml.nn.Dense(2),
        ],
        random_state=0,
    )
    rng = np.random.default_rng(1)
    X, y = rng.standard_normal((8, 5, 5, 1)), rng.integers(0, 2, 8)
    net.fit(X, y, epochs=1, batch_size=4, shuffle=False)
    assert calls["dX"] == 2  # the second conv only, one call a batch
