"""xpml.nn layers against PyTorch autograd (float64, rtol 1e-10) and finite differences."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from xpml.nn import (
    AvgPool2D,
    BatchNorm1D,
    Conv2D,
    Dense,
    Flatten,
    Identity,
    LogisticLoss,
    MaxPool2D,
    MSELoss,
    ReLU,
    Sigmoid,
    Softmax,
    SoftmaxCrossEntropy,
    Tanh,
)
from xpml.nn.conv import contract, windows

torch = pytest.importorskip("torch")
F = torch.nn.functional

RTOL = 1e-10


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """Tiny torch ops on a shared 2-core machine: extra threads only spin."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def close(got, want, rtol=RTOL):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    np.testing.assert_allclose(
        got, want, rtol=rtol, atol=rtol * max(1.0, np.abs(want).max())
    )


def t(a, grad=True):
    return torch.tensor(np.asarray(a), dtype=torch.float64, requires_grad=grad)


def nchw(a):
    return np.ascontiguousarray(np.transpose(a, (0, 3, 1, 2)))


def nhwc(a):
    return np.transpose(a.detach().numpy(), (0, 2, 3, 1))


# (kernel, stride, padding, N, H, W, C_in, C_out): every kernel 1-5, stride 1-3 and
# padding 0-2 appears, on non-square inputs and several channel counts and batch sizes
CONV_GRID = [
    (1, 1, 0, 2, 5, 7, 1, 3),
    (1, 2, 2, 1, 6, 5, 3, 2),
    (2, 1, 1, 3, 7, 6, 2, 4),
    (2, 3, 0, 2, 9, 8, 3, 1),
    (3, 1, 1, 2, 6, 9, 4, 5),
    (3, 2, 0, 1, 7, 10, 2, 3),
    (3, 3, 2, 2, 8, 7, 1, 2),
    (4, 1, 2, 2, 5, 6, 3, 3),
    (4, 2, 1, 3, 9, 7, 2, 2),
    (4, 3, 0, 1, 11, 10, 1, 4),
    (5, 1, 0, 2, 7, 9, 2, 3),
    (5, 2, 2, 1, 8, 6, 3, 2),
    (5, 3, 1, 2, 10, 12, 2, 1),
    ((2, 3), (1, 2), (1, 0), 2, 6, 9, 3, 2),
    (3, 2, 1, 4, 16, 14, 8, 6),
    # stride 1 with padding past k - 1: "correlate" crops dZ (the windows path)
    (1, 1, 1, 2, 4, 5, 2, 3),
    ((2, 3), 1, (2, 1), 1, 5, 4, 3, 2),
]


@pytest.mark.parametrize("input_grad", ["correlate", "fold", "auto"])
@pytest.mark.parametrize("k,s,p,N,H,W,ci,co", CONV_GRID)
def test_conv2d_matches_torch(k, s, p, N, H, W, ci, co, input_grad):
    rng = np.random.default_rng(N * 1000 + H * 10 + W)
    X = rng.normal(size=(N, H, W, ci))
    conv = Conv2D(co, k, stride=s, padding=p, input_grad=input_grad, random_state=1)
    Z = conv.forward(X)
    dZ = rng.normal(size=Z.shape)
    conv.params["b"] = rng.normal(size=co)
    Z = conv.forward(X)
    dX = conv.backward(dZ)
    Xt = t(nchw(X))
    Wt = t(np.transpose(conv.params["W"], (3, 2, 0, 1)))
    bt = t(conv.params["b"])
    Zt = F.conv2d(Xt, Wt, bt, stride=s, padding=p)
    Zt.backward(torch.tensor(nchw(dZ)))
    close(Z, nhwc(Zt))
    close(dX, np.transpose(Xt.grad.numpy(), (0, 2, 3, 1)))
    close(conv.grads["W"], np.transpose(Wt.grad.numpy(), (2, 3, 1, 0)))
    close(conv.grads["b"], bt.grad.numpy())


@pytest.mark.parametrize("input_grad", ["correlate", "fold"])
@pytest.mark.parametrize(
    "k,s,p", [(3, 1, 1), (3, 1, 0), ((3, 2), 2, (1, 0)), (5, 1, 2)]
)
def test_conv2d_float32_matches_torch(monkeypatch, k, s, p, input_grad):
    """float32 stays float32 through the NumPy block paths and matches torch's
    float32 autograd to float32 rounding (a batch spanning several blocks)."""
    from xpml.nn import conv as conv_module

    monkeypatch.setattr(conv_module, "BLOCK_BYTES", 40_000)  # a few images a block
    rng = np.random.default_rng(5)
    X = rng.normal(size=(9, 11, 13, 6)).astype(np.float32)
    conv = Conv2D(7, k, stride=s, padding=p, input_grad=input_grad, random_state=2)
    conv.forward(X)
    conv.params["W"] = conv.params["W"].astype(np.float32)
    conv.params["b"] = rng.normal(size=7).astype(np.float32)
    Z = conv.forward(X)
    dZ = rng.normal(size=Z.shape).astype(np.float32)
    dX = conv.backward(dZ)
    f32 = {"dtype": torch.float32, "requires_grad": True}
    Xt = torch.tensor(nchw(X), **f32)
    Wt = torch.tensor(np.transpose(conv.params["W"], (3, 2, 0, 1)), **f32)
    bt = torch.tensor(conv.params["b"], **f32)
    Zt = F.conv2d(Xt, Wt, bt, stride=s, padding=p)
    Zt.backward(torch.tensor(nchw(dZ)))
    got = (Z, dX, conv.grads["W"], conv.grads["b"])
    want = (
        nhwc(Zt),
        np.transpose(Xt.grad.numpy(), (0, 2, 3, 1)),
        np.transpose(Wt.grad.numpy(), (2, 3, 1, 0)),
        bt.grad.numpy(),
    )
    for g, w in zip(got, want, strict=True):
        assert g.dtype == np.float32
        close(g, w, rtol=2e-5)


def test_contract_is_the_einsum():
    import array_api_compat.numpy as xp

    from xpml.nn.conv import dilate_pad, window_matrix

    rng = np.random.default_rng(0)
    X = rng.normal(size=(2, 6, 5, 3))
    W = rng.normal(size=(3, 2, 3, 4))
    cols = windows(X, (3, 2), (1, 2), (1, 0), xp=xp)
    assert cols.shape == (2, 6, 2, 3, 2, 3)
    Xp = np.pad(X, ((0, 0), (1, 1), (0, 0), (0, 0)))
    close(cols[1, 2, 1, 2, 1], Xp[1, 2 + 2, 1 * 2 + 1])
    A, _ = window_matrix(
        dilate_pad(X, (1, 1), (1, 1), (0, 0), xp=xp),
        (3, 2),
        (1, 2),
        xp=xp,
    )
    close(contract(A, W, (2, 6, 2), xp=xp), np.einsum("nhwijc,ijco->nhwo", cols, W))


# (kernel, stride, padding, N, H, W, C)
POOL_GRID = [
    (1, 1, 0, 2, 5, 7, 3),
    (2, None, 0, 3, 8, 6, 2),
    (2, 1, 1, 1, 5, 7, 4),
    (3, 2, 1, 2, 9, 7, 1),
    (3, 3, 0, 2, 10, 11, 3),
    (4, 2, 2, 1, 9, 8, 2),
    (5, 3, 2, 2, 12, 10, 2),
    (5, 1, 1, 1, 7, 9, 3),
    ((2, 3), (1, 2), (1, 1), 2, 6, 9, 2),
]


@pytest.mark.parametrize(
    "Pool,tfun",
    [(MaxPool2D, F.max_pool2d), (AvgPool2D, F.avg_pool2d)],
    ids=["max", "avg"],
)
@pytest.mark.parametrize("k,s,p,N,H,W,C", POOL_GRID)
def test_pool2d_matches_torch(Pool, tfun, k, s, p, N, H, W, C):
    rng = np.random.default_rng(N * 100 + H)
    X = rng.normal(size=(N, H, W, C))
    pool = Pool(k, stride=s, padding=p)
    Y = pool.forward(X)
    dY = rng.normal(size=Y.shape)
    dX = pool.backward(dY)
    Xt = t(nchw(X))
    Yt = tfun(Xt, k, stride=s if s is not None else k, padding=p)
    Yt.backward(torch.tensor(nchw(dY)))
    assert pool.output_shape(X.shape[1:]) == Y.shape[1:]
    close(Y, nhwc(Yt))
    close(dX, np.transpose(Xt.grad.numpy(), (0, 2, 3, 1)))


def test_max_pool_splits_ties_evenly():
    X = np.zeros((1, 4, 4, 1))
    X[0, 0, 0, 0] = X[0, 1, 1, 0] = 2.0  # two maxima in the first window
    pool = MaxPool2D(2)
    pool.forward(X)
    dX = pool.backward(np.ones((1, 2, 2, 1)))[0, :, :, 0]
    assert dX[0, 0] == dX[1, 1] == 0.5 and dX[0, 1] == dX[1, 0] == 0.0
    np.testing.assert_array_equal(dX[2:, 2:], np.full((2, 2), 0.25))  # four-way tie
    assert dX.sum() == 4.0


@pytest.mark.parametrize("N,d,units", [(1, 3, 2), (5, 4, 3), (17, 9, 6)])
def test_dense_matches_torch(N, d, units):
    rng = np.random.default_rng(N)
    X = rng.normal(size=(N, d))
    layer = Dense(units, random_state=0)
    layer.forward(X)
    layer.params["b"] = rng.normal(size=units)
    Y = layer.forward(X)
    dY = rng.normal(size=Y.shape)
    dX = layer.backward(dY)
    Xt, Wt, bt = t(X), t(layer.params["W"]), t(layer.params["b"])
    Yt = Xt @ Wt + bt
    Yt.backward(torch.tensor(dY))
    close(Y, Yt.detach().numpy())
    close(dX, Xt.grad.numpy())
    close(layer.grads["W"], Wt.grad.numpy())
    close(layer.grads["b"], bt.grad.numpy())


@pytest.mark.parametrize("N,d", [(2, 3), (8, 5), (33, 4)])
def test_batchnorm1d_matches_torch(N, d):
    rng = np.random.default_rng(N)
    X = rng.normal(loc=3.0, scale=2.0, size=(N, d))
    bn = BatchNorm1D(momentum=0.2)
    bn.forward(X)
    bn.params["gamma"], bn.params["beta"] = rng.normal(size=d), rng.normal(size=d)
    bn.running_mean, bn.running_var = np.zeros(d), np.ones(d)
    rm, rv = torch.zeros(d, dtype=torch.float64), torch.ones(d, dtype=torch.float64)
    Xt, gt, bt = t(X), t(bn.params["gamma"]), t(bn.params["beta"])
    for training in (True, False):
        bn.train(training)
        Y = bn.forward(X)
        dY = rng.normal(size=Y.shape)
        dX = bn.backward(dY)
        for a in (Xt, gt, bt):
            a.grad = None
        Yt = F.batch_norm(Xt, rm, rv, gt, bt, training=training, momentum=0.2, eps=1e-5)
        Yt.backward(torch.tensor(dY))
        close(Y, Yt.detach().numpy())
        close(dX, Xt.grad.numpy())
        close(bn.grads["gamma"], gt.grad.numpy())
        close(bn.grads["beta"], bt.grad.numpy())
        close(bn.running_mean, rm.numpy())
        close(bn.running_var, rv.numpy())


@pytest.mark.parametrize("N,k", [(1, 2), (7, 3), (20, 10)])
def test_softmax_cross_entropy_matches_torch(N, k):
    rng = np.random.default_rng(N)
    Z = rng.normal(scale=3.0, size=(N, k))
    y = rng.integers(0, k, size=N)
    loss = SoftmaxCrossEntropy()
    value = loss.forward(Z, y)
    dZ = loss.backward()
    Zt = t(Z)
    lt = F.cross_entropy(Zt, torch.tensor(y))
    lt.backward()
    close(value, lt.item())
    close(dZ, Zt.grad.numpy())
    # extreme logits stay finite
    big = SoftmaxCrossEntropy().forward(np.array([[1000.0, -1000.0]]), np.array([1]))
    close(big, 2000.0)


def test_logistic_and_mse_match_torch():
    rng = np.random.default_rng(0)
    z, y = rng.normal(scale=4.0, size=(9, 1)), rng.integers(0, 2, size=9).astype(float)
    loss = LogisticLoss()
    value, dz = loss.forward(z, y), loss.backward()
    zt = t(z)
    lt = F.binary_cross_entropy_with_logits(zt, torch.tensor(y[:, None]))
    lt.backward()
    close(value, lt.item())
    close(dz, zt.grad.numpy())
    Z, Y = rng.normal(size=(6, 3)), rng.normal(size=(6, 3))
    loss = MSELoss()
    value, dZ = loss.forward(Z, Y), loss.backward()
    Zt = t(Z)
    lt = F.mse_loss(Zt, torch.tensor(Y))
    lt.backward()
    close(value, lt.item())
    close(dZ, Zt.grad.numpy())


@pytest.mark.parametrize(
    "Layer,tfun",
    [
        (ReLU, torch.relu),
        (Sigmoid, torch.sigmoid),
        (Tanh, torch.tanh),
        (Identity, lambda a: a),
        (lambda: Softmax(), lambda a: torch.softmax(a, dim=-1)),
    ],
    ids=["relu", "sigmoid", "tanh", "identity", "softmax"],
)
def test_activations_match_torch(Layer, tfun):
    rng = np.random.default_rng(0)
    X = rng.normal(scale=3.0, size=(5, 4))
    dY = rng.normal(size=X.shape)
    layer = Layer()
    Y = layer.forward(X)
    dX = layer.backward(dY)
    Xt = t(X)
    Yt = tfun(Xt)
    Yt.backward(torch.tensor(dY))
    close(Y, Yt.detach().numpy())
    close(dX, Xt.grad.numpy())


# ------------------------------------------------------------ finite differences
def _numeric_grad(f, A, idx, h=1e-6):
    out = []
    for i in idx:
        Ap, Am = A.copy(), A.copy()
        Ap.flat[i] += h
        Am.flat[i] -= h
        out.append((f(Ap) - f(Am)) / (2 * h))
    return np.array(out)


def _check_layer_fd(layer, X, rng, n_checks=12, rtol=1e-6):
    Y = layer.forward(X)
    G = rng.normal(size=Y.shape)
    dX = layer.backward(G)
    grads = {k: v.copy() for k, v in layer.grads.items()}
    idx = rng.choice(X.size, size=min(n_checks, X.size), replace=False)
    num = _numeric_grad(lambda A: float(np.sum(layer.forward(A) * G)), X, idx)
    np.testing.assert_allclose(dX.flat[idx], num, rtol=rtol, atol=rtol)
    for key, P in list(layer.params.items()):
        P0 = P.copy()

        def f(A, key=key):
            layer.params[key] = A
            return float(np.sum(layer.forward(X) * G))

        pidx = rng.choice(P.size, size=min(n_checks, P.size), replace=False)
        num = _numeric_grad(f, P0, pidx)
        layer.params[key] = P0
        np.testing.assert_allclose(
            grads[key].flat[pidx], num, rtol=rtol, atol=rtol, err_msg=key
        )


@pytest.mark.parametrize(
    "make,shape",
    [
        (lambda: Dense(4, random_state=0), (5, 3)),
        (lambda: BatchNorm1D(), (6, 4)),
        (lambda: Conv2D(3, 3, stride=2, padding=1, random_state=0), (2, 7, 6, 2)),
        (
            lambda: Conv2D(2, (2, 3), stride=(2, 1), padding=(0, 2), random_state=0),
            (2, 5, 4, 3),
        ),
        (
            lambda: Conv2D(
                3, 3, stride=2, padding=1, input_grad="fold", random_state=0
            ),
            (2, 7, 6, 2),
        ),
        (lambda: MaxPool2D(3, stride=2, padding=1), (2, 7, 6, 2)),
        (lambda: AvgPool2D(2, stride=1, padding=1), (2, 5, 6, 2)),
        (lambda: Flatten(), (2, 3, 4, 2)),
        (lambda: ReLU(), (4, 5)),
        (lambda: Sigmoid(), (4, 5)),
        (lambda: Tanh(), (4, 5)),
        (lambda: Identity(), (4, 5)),
        (lambda: Softmax(), (4, 5)),
    ],
    ids=[
        "dense",
        "batchnorm",
        "conv",
        "conv-rect",
        "conv-fold",
        "maxpool",
        "avgpool",
        "flatten",
        "relu",
        "sigmoid",
        "tanh",
        "identity",
        "softmax",
    ],
)
def test_layer_gradients_match_finite_differences(make, shape):
    rng = np.random.default_rng(0)
    _check_layer_fd(make(), rng.normal(size=shape), rng)


@pytest.mark.parametrize(
    "loss,target",
    [
        (SoftmaxCrossEntropy(), lambda rng: rng.integers(0, 4, size=6)),
        (LogisticLoss(), lambda rng: rng.integers(0, 2, size=6).astype(float)),
        (MSELoss(), lambda rng: rng.normal(size=(6, 4))),
    ],
    ids=["cross_entropy", "logistic", "mse"],
)
def test_loss_gradients_match_finite_differences(loss, target):
    rng = np.random.default_rng(1)
    y = target(rng)
    Z = rng.normal(size=(6, 1) if isinstance(loss, LogisticLoss) else (6, 4))
    loss.forward(Z, y)
    dZ = loss.backward()
    num = _numeric_grad(lambda A: float(loss.forward(A, y)), Z, range(Z.size))
    np.testing.assert_allclose(dZ.ravel(), num, rtol=1e-6, atol=1e-8)


# --------------------------------------------------------------- every backend
@pytest.mark.parametrize(
    "make,shape",
    [
        (lambda: Conv2D(3, 3, stride=2, padding=1, random_state=0), (2, 7, 6, 2)),
        (
            lambda: Conv2D(
                3, 2, stride=3, padding=2, input_grad="fold", random_state=0
            ),
            (2, 7, 6, 2),
        ),
        (lambda: MaxPool2D(2, padding=1), (2, 5, 6, 2)),
        (lambda: AvgPool2D(3, stride=2), (2, 7, 6, 2)),
        (lambda: BatchNorm1D(), (6, 4)),
        (lambda: Dense(3, random_state=0), (6, 4)),
    ],
    ids=["conv", "conv-fold", "maxpool", "avgpool", "batchnorm", "dense"],
)
def test_layers_agree_across_libraries(xp, make, shape):
    rng = np.random.default_rng(0)
    X = rng.normal(size=shape)
    ref = make()
    Y = ref.forward(X)
    G = rng.normal(size=Y.shape)
    dX = ref.backward(G)
    layer = make()
    Yb = layer.forward(xp.asarray(X))
    dXb = layer.backward(xp.asarray(G))
    assert xp.is_native(Yb) and xp.is_native(dXb)
    close(xp.to_numpy(Yb), Y, rtol=1e-12)
    close(xp.to_numpy(dXb), dX, rtol=1e-12)
    for k in ref.grads:
        close(xp.to_numpy(layer.grads[k]), ref.grads[k], rtol=1e-12)


@pytest.mark.parametrize(
    "make,shape",
    [
        (lambda: Conv2D(3, 3, padding=1, random_state=0), (0, 6, 5, 2)),
        (lambda: Conv2D(3, 3, padding=1, input_grad="fold"), (0, 6, 5, 2)),
        (lambda: Conv2D(3, 2, stride=2, padding=1, random_state=0), (0, 7, 6, 2)),
        (lambda: Conv2D(3, 2, stride=2, input_grad="fold"), (0, 7, 6, 2)),
        (lambda: MaxPool2D(2), (0, 6, 6, 2)),
        (lambda: Flatten(), (0, 3, 4, 2)),
        (lambda: Dense(3, random_state=0), (0, 4)),
    ],
    ids=["conv", "conv-fold", "conv-s2", "conv-s2-fold", "maxpool", "flatten", "dense"],
)
def test_layers_take_an_empty_batch(xp, make, shape):
    """As in PyTorch, a batch of no images goes forward and back: outputs of the
    layer's shape with no rows, and zero parameter gradients."""
    layer, ref = make(), make()
    want = ref.forward(np.ones((1, *shape[1:]))).shape[1:]
    X = xp.asarray(np.zeros(shape))
    Y = layer.forward(X)
    assert tuple(Y.shape) == (0, *want) and xp.is_native(Y)
    dX = layer.backward(xp.asarray(np.zeros((0, *want))))
    assert tuple(dX.shape) == shape and xp.is_native(dX)
    for name, g in layer.grads.items():
        assert tuple(g.shape) == tuple(layer.params[name].shape)
        assert not np.any(xp.to_numpy(g)), name


def test_batchnorm_refuses_an_empty_training_batch():
    bn = BatchNorm1D()
    with pytest.raises(ValueError, match="at least one sample"):
        bn.forward(np.zeros((0, 3)))
    bn.forward(np.ones((2, 3)))
    bn.training = False
    assert bn.forward(np.zeros((0, 3))).shape == (0, 3)  # the running statistics


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="kernel_size"):
        Conv2D(2, 0).forward(np.ones((1, 3, 3, 1)))
    with pytest.raises(ValueError, match="stride"):
        MaxPool2D(2, stride=(1, 2, 3)).forward(np.ones((1, 3, 3, 1)))
    with pytest.raises(ValueError, match="in_channels=2"):
        Conv2D(2, 1, in_channels=2).forward(np.ones((1, 3, 3, 1)))
    with pytest.raises(ValueError, match="padding"):
        MaxPool2D(2, padding=2).forward(np.ones((1, 6, 6, 1)))
    with pytest.raises(ValueError, match="input_grad"):
        Conv2D(2, 1, input_grad="fft").forward(np.ones((1, 3, 3, 1)))
    with pytest.raises(ValueError, match="init"):
        Dense(2, init="zeros").forward(np.ones((1, 3)))


# ------------------------------------------------- input_grad="auto"
@pytest.mark.parametrize(
    "stride,ci,co,on_numpy",
    [
        ((1, 1), 16, 32, "correlate"),  # 2 C_in = C_out
        ((1, 1), 16, 8, "correlate"),
        ((1, 1), 8, 32, "fold"),
        ((1, 1), 1, 16, "fold"),
        ((2, 2), 64, 64, "fold"),  # a stride past 1: "fold" skips the zeros
        ((1, 2), 16, 16, "fold"),
    ],
)
def test_auto_input_grad_takes_the_measured_faster_method(
    xp, monkeypatch, stride, ci, co, on_numpy
):
    """ "auto" is the rule of ``choose_input_grad`` (NumPy: "correlate" at
    stride 1 when 2 C_in >= C_out; other libraries: "fold"), and the layer's
    backward runs the method it names (seen by spying on the two methods)."""
    from xpml.nn import conv as conv_module

    want = on_numpy if xp.backend == "numpy" else "fold"
    assert conv_module.choose_input_grad("auto", xp.xp, stride, ci, co) == want
    for explicit in ("fold", "correlate"):  # explicit choices pass through
        assert (
            conv_module.choose_input_grad(explicit, xp.xp, stride, ci, co) == explicit
        )

    called = []
    s1 = conv_module.conv_backward_s1

    def spy_s1(*args, method, **kw):
        called.append(method)
        return s1(*args, method=method, **kw)

    monkeypatch.setattr(conv_module, "conv_backward_s1", spy_s1)
    for name in ("fold", "correlate"):
        fn = conv_module.INPUT_GRAD[name]
        monkeypatch.setitem(
            conv_module.INPUT_GRAD,
            name,
            lambda *a, _fn=fn, _name=name, **kw: called.append(_name) or _fn(*a, **kw),
        )
    layer = Conv2D(co, 3, stride=stride, padding=1, random_state=0)
    assert layer.input_grad == "auto"  # the default
    Z = layer.forward(xp.asarray(np.ones((2, 7, 6, ci))))
    layer.backward(xp.asarray(np.ones(tuple(Z.shape))))
    assert called and set(called) == {want}  # portable stride 1: spied twice


# ----------------------------------------------- the layer's reused workspace
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("input_grad", ["correlate", "fold"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_conv_workspace_equals_fresh_buffers(xp, input_grad, dtype, stride):
    """The layer's scratch buffer (windows, then ``W dZᵀ`` / the padded ``dZ``'s
    windows over them, an image group at a time; with stride 1 the padded ``dZ``
    grid and its product, margins re-zeroed) gives what the allocating
    functions give (bit for bit; ``dX`` of "correlate" to rounding),
    over calls that shrink and regrow the batch and a second backward after
    one forward (``A`` rebuilt); float32 stays float32."""
    from xpml.nn.conv import conv2d, conv2d_backward

    rtol = 1e-12 if dtype == "float64" else 1e-5
    rng = np.random.default_rng(3)
    s = (stride, stride)
    layer = Conv2D(4, 3, stride=s, padding=1, input_grad=input_grad, random_state=0)
    for n, dt, twice in [(3, dtype, False), (2, dtype, True), (3, dtype, False)]:
        X = xp.asarray(rng.normal(size=(n, 7, 6, 2)).astype(dt))
        Z = layer.forward(X)
        W = xp.asarray(xp.to_numpy(layer.params["W"]).astype(dt))
        b = xp.asarray(xp.to_numpy(layer.params["b"]).astype(dt))
        G = xp.asarray(rng.normal(size=tuple(Z.shape)).astype(dt))
        Z0, A0 = conv2d(X, W, b, stride=s, padding=(1, 1), xp=xp.xp)
        want = conv2d_backward(
            G,
            A0,
            W,
            (7, 6),
            stride=s,
            padding=(1, 1),
            xp=xp.xp,
            input_grad=input_grad,
        )
        for _ in range(2 if twice else 1):
            dX = layer.backward(G)
            got = (dX, layer.grads["W"], layer.grads["b"])
            assert str(xp.to_numpy(dX).dtype) == dt
            # "correlate": dX from image groups' products, and at stride 1 dW
            # from the padded dZ's windows (Xᵀ B): BLAS may round them otherwise
            rounded = ()
            if input_grad == "correlate":  # at stride 2 dW is the allocating one's
                rounded = (dX, got[1]) if stride == 1 else (dX,)
            for g, w in zip((Z, *got), (Z0, *want), strict=True):
                if any(g is r for r in rounded):
                    close(xp.to_numpy(g), xp.to_numpy(w), rtol=rtol)
                else:
                    np.testing.assert_array_equal(xp.to_numpy(g), xp.to_numpy(w))


@pytest.mark.parametrize("one_thread", [False, True])
@pytest.mark.parametrize("stride", [(1, 1), (2, 1)])
def test_conv_numpy_image_blocks_equal_the_portable_paths(
    monkeypatch, one_thread, stride
):
    """On NumPy the forward, dW, stride-1 dX (both methods) and the fused
    stride-1 backward run over blocks of images split among threads: with blocks of one or two images (several per thread, a last
    short one), with and without a one-thread BLAS limit, they equal the
    portable whole-batch paths, and the inputs are left unchanged."""
    import contextlib

    from threadpoolctl import threadpool_limits

    from xpml.nn import conv

    rng = np.random.default_rng(3)
    X = rng.standard_normal((7, 6, 5, 3))
    W, b = rng.standard_normal((3, 3, 3, 4)), rng.standard_normal(4)
    Xc, Wc = X.copy(), W.copy()
    pad = (1, 1)
    Ho = conv.out_size(6, 3, stride[0], 1)
    Wo = conv.out_size(5, 3, stride[1], 1)
    dZ = rng.standard_normal((7, Ho, Wo, 4))
    per_image = Ho * Wo * 9 * 3 * 8
    monkeypatch.setattr(conv, "BLOCK_BYTES", 2 * per_image - 1)  # 1-image blocks
    limit = threadpool_limits(1) if one_thread else contextlib.nullcontext()
    with limit:
        Z = conv._conv_forward_numpy(X, W, b, stride, pad, xp=np)
        dW = conv._weight_grad_numpy(X, dZ, (3, 3), stride, pad, xp=np)
        dX = {}
        if stride == (1, 1):
            monkeypatch.setattr(conv, "BLOCK_BYTES", 1)  # one image a block
            for method in ("fold", "correlate"):
                dX[method] = conv._input_grad_s1_numpy(
                    dZ, W, (6, 5), pad, xp=np, method=method
                )
            for method in ("fold", "correlate"):  # (dX, dW) in one pass
                fused = conv._backward_s1_numpy(X, dZ, W, pad, xp=np, method=method)
                apart = conv._backward_s1_portable(X, dZ, W, pad, xp=np, method=method)
                for got, want in zip(fused, apart, strict=True):
                    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        Z,
        conv._conv_forward_portable(X, W, b, stride, pad, xp=np),
        rtol=1e-12,
        atol=1e-12,
    )
    np.testing.assert_allclose(
        dW,
        conv._weight_grad_portable(X, dZ, (3, 3), stride, pad, xp=np),
        rtol=1e-12,
        atol=1e-12,
    )
    for method, got in dX.items():
        want = conv._input_grad_s1_portable(dZ, W, (6, 5), pad, xp=np, method=method)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(X, Xc)
    np.testing.assert_array_equal(W, Wc)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "kernel, stride, pad",
    [
        ((3, 3), (1, 1), ((1, 1), (1, 1))),
        ((3, 2), (2, 1), ((0, 0), (0, 0))),
        ((2, 3), (1, 2), ((2, 0), (1, 1))),
        ((3, 3), (1, 1), ((2, 1), (2, 0))),  # the correlation's uneven padding
    ],
)
def test_conv_window_sizes_match_the_block_buffers(dtype, kernel, stride, pad):
    """The block sizing reads one image's window grid and bytes from
    ``_window_sizes`` (arithmetic, issue 16: no one-image buffers made just to
    measure them); they are those of the buffers ``_BlockWindows`` builds."""
    from xpml.nn import conv

    X = np.zeros((3, 7, 6, 5), dtype=dtype)
    made = conv._BlockWindows(1, X, kernel, stride, pad)
    Ho, Wo, nbytes = conv._window_sizes(X, kernel, stride, pad)
    assert (Ho, Wo) == made.V.shape[1:3]
    assert Ho * Wo == made.per
    assert nbytes == made.bytes == made.A[0].nbytes


def _split_case(rng, dtype, kernel, padding, bias):
    """Read-only, non-contiguous NHWC input (9 x 8 images, 5 channels), a
    kernel to 6 channels, its bias (or None) and a read-only ``dZ``."""
    from xpml.nn import conv

    X = rng.standard_normal((7, 9, 16, 5)).astype(dtype)[:, :, ::2, :]
    W = rng.standard_normal((*kernel, 5, 6)).astype(dtype)
    b = rng.standard_normal(6).astype(dtype) if bias else None
    Ho = conv.out_size(9, kernel[0], 1, padding[0])
    Wo = conv.out_size(8, kernel[1], 1, padding[1])
    dZ = rng.standard_normal((7, Ho, Wo, 6)).astype(dtype)
    for a in (X, W, dZ):
        a.flags.writeable = False
    return X, W, b, dZ


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("one_thread", [False, True])
@pytest.mark.parametrize(
    "kernel, padding, bias",
    [
        ((3, 3), (1, 1), True),
        ((3, 2), (0, 1), False),
        ((5, 5), (2, 2), True),
        ((2, 3), (1, 0), True),
        ((1, 1), (0, 0), False),
    ],
)
@pytest.mark.parametrize("small_product", [None, 1000, 1])
def test_conv_kernel_row_split_equals_the_window_matrix(
    monkeypatch, dtype, one_thread, kernel, padding, bias, small_product
):
    """The kernel-row split (stride 1 on NumPy: each image's row windows and
    k_h products, summed in place by NumPy's OpenBLAS in the forward, made
    as stacks of NumPy matmul and summed in the backward) gives the forward and
    the fused backward of the window-matrix path and of the portable
    whole-batch paths, over blocks of one image on one and on two threads,
    for square, uneven and 1 x 1 kernels, with and without bias and padding,
    each image's products whole or in pieces of rows (uneven ones, and one
    row each: ``Gemm.small_product``); inputs (read-only, non-contiguous)
    untouched, and the split was taken."""
    import contextlib

    from threadpoolctl import threadpool_limits

    from xpml.linalg import numpy_gemm
    from xpml.nn import conv

    gemm = numpy_gemm(np.dtype(dtype).char)
    if gemm is None:
        pytest.skip("this NumPy is not built on a wheel's OpenBLAS")
    monkeypatch.setattr(gemm, "small_product", small_product)
    rng = np.random.default_rng(11)
    X, W, b, dZ = _split_case(rng, dtype, kernel, padding, bias)
    kept = [a.copy() for a in (X, W, dZ)]
    taken = []

    def spy(name):
        real = getattr(conv, name)

        def counted(*args, **kwargs):
            taken.append(name)
            return real(*args, **kwargs)

        monkeypatch.setattr(conv, name, counted)

    spy("_conv_forward_rows")
    spy("_backward_s1_rows")
    monkeypatch.setattr(conv, "BLOCK_BYTES", 1)  # one image a block
    limit = threadpool_limits(1) if one_thread else contextlib.nullcontext()

    def both(values):
        monkeypatch.setattr(conv, "ROW_SPLIT_MIN_VALUES", values)
        monkeypatch.setattr(conv, "ROW_SPLIT_MIN_PIXELS", 1)
        with limit:
            Z = conv._conv_forward_numpy(X, W, b, (1, 1), padding, xp=np)
            return (Z, *conv._backward_s1_numpy(X, dZ, W, padding, xp=np))

    split = both(1)
    assert taken == ["_conv_forward_rows", "_backward_s1_rows"]
    window = both(10**9)
    assert len(taken) == 2  # the window matrix, not the split, this time
    portable = (
        conv._conv_forward_portable(X, W, b, (1, 1), padding, xp=np),
        *conv._backward_s1_portable(X, dZ, W, padding, xp=np),
    )
    tol = 1e-12 if dtype == np.float64 else 2e-5
    for got, w1, w2 in zip(split, window, portable, strict=True):
        assert got.dtype == dtype and got.shape == w2.shape
        scale = np.abs(w2).max()
        np.testing.assert_allclose(got, w1, rtol=0, atol=tol * scale)
        np.testing.assert_allclose(got, w2, rtol=0, atol=tol * scale)
    for a, k in zip((X, W, dZ), kept, strict=True):
        np.testing.assert_array_equal(a, k)


def test_conv_kernel_row_split_only_where_it_pays(monkeypatch):
    """The split is taken for stride 1, at least ROW_SPLIT_MIN_VALUES values
    in a kernel row's window row and ROW_SPLIT_MIN_PIXELS outputs an image,
    one float dtype throughout and NumPy's OpenBLAS found; otherwise the
    window matrix (the same result: see above). The bench's layer, 28 x 28
    images 16 -> 32 channels with a 3 x 3 kernel, takes it both ways."""
    from xpml.linalg import numpy_gemm
    from xpml.nn import conv

    if numpy_gemm("f") is None:
        pytest.skip("this NumPy is not built on a wheel's OpenBLAS")
    f32, f64 = np.zeros(1, np.float32), np.zeros(1, np.float64)
    rule = conv._row_split_gemm
    assert rule((3, 3), (1, 1), 16, (28, 28), f32, f32) is numpy_gemm("f")
    assert rule((3, 3), (1, 1), 32, (28, 28), f64, f64, None) is numpy_gemm("d")
    assert rule((3, 3), (2, 1), 16, (28, 28), f32) is None  # a stride
    assert rule((3, 3), (1, 1), 8, (28, 28), f32) is None  # 24 values a row
    assert rule((3, 3), (1, 1), 16, (14, 14), f32) is None  # 196 outputs
    assert rule((3, 3), (1, 1), 16, (28, 28), f32, f64) is None  # mixed
    assert rule((3, 3), (1, 1), 16, (28, 28), f32.astype(np.float16)) is None
    monkeypatch.setattr(conv, "numpy_gemm", lambda char: None)  # other builds
    assert rule((3, 3), (1, 1), 16, (28, 28), f32) is None


@pytest.mark.parametrize("n, per_image, threads", [(64, 3, 2), (7, 1, 2), (10, 4, 3)])
def test_conv_image_groups_split_the_images_evenly(monkeypatch, n, per_image, threads):
    """The threads of a layer's NumPy pass get the images in even shares
    (differing by at most one), each share cut into blocks of at most the
    block size in images; together, every image once and in order. (Split by
    blocks, a short last block left one thread 4 images of 64 behind.)"""
    from xpml.nn import conv

    monkeypatch.setattr(conv, "host_threads", lambda xp: threads)
    monkeypatch.setattr(conv, "one_blas_thread", lambda xp: False)
    monkeypatch.setattr(conv, "BLOCK_BYTES", 5 * per_image)  # 5 images a block
    made = []  # (step, thread) of each scratch

    def scratch(step):
        made.append((step, threading.get_ident()))
        return object()

    got = conv._map_image_groups(
        lambda blocks, own: (blocks, own, threading.get_ident()),
        n,
        per_image,
        scratch,
        xp=np,
    )
    shares = [blocks for blocks, _, _ in got]
    assert len(shares) == min(threads, -(-n // 5))  # no thread without a block
    # one scratch per group, each made in the calling thread, each task its own
    assert made == [(min(5, n), threading.get_ident())] * len(shares)
    assert len({id(own) for _, own, _ in got}) == len(shares)
    if len(shares) > 1:  # the other groups ran on the workers
        assert len({thread for _, _, thread in got}) > 1
    sizes = [sum(i1 - i0 for i0, i1 in share) for share in shares]
    assert max(sizes) - min(sizes) <= 1
    flat = [block for share in shares for block in share]
    assert all(0 < i1 - i0 <= 5 for i0, i1 in flat)
    assert [i for i0, i1 in flat for i in range(i0, i1)] == list(range(n))
