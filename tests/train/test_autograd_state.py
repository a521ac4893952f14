"""The whole state of an autograd model: nn.Jax's leaves marked non-trainable (``trainable=``) are model state, made
rank 0's, kept in results files and checkpoints and never trained; integer features read from an HDF5 file reach
an nn.Torch module as int64 (an Embedding first layer), as integer arrays do."""

import importlib.util
import json
import os

import numpy as np
import pytest

import _mpi
import autograd_state_models as asm
from hpcgpu import optim
from hpcgpu._device import asnumpy

HAS_JAX = importlib.util.find_spec("jax") is not None
HAS_TORCH = importlib.util.find_spec("torch") is not None
JAX = pytest.mark.skipif(not HAS_JAX, reason="jax is not installed")
TORCH = [pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed"), _mpi.torch_device()]


def _fit(model, data=None, **extra):
    import hpcgpu

    t = hpcgpu.Trainer(model, optimizer=optim.SGD(lr=0.05, momentum=0.9), **{**asm.COMMON, **extra})
    t.fit(asm.data() if data is None else data)
    return t


@JAX
def test_non_trainable_leaves_are_the_function_s_constants_never_trained(tmp_path):
    """A mask over a prefix of the pytree: the marked leaves (a float projection, an int32 permutation) are no
    parameters of the trainer's and stay as given, the model is the one of the same function closing over them as
    constants, the results file keeps them (/buffers), and tree() gives the whole pytree back."""
    import h5py
    import jax

    from hpcgpu import nn

    m = asm.jax_model(100)
    t = _fit(m)
    given = asm.jax_params(100)
    assert sorted(t.params) == ["fc.b", "fc.w"] and m.state_names == ["fixed.perm", "fixed.proj"]
    for k, v in (("fixed.perm", given["fixed"]["perm"]), ("fixed.proj", given["fixed"]["proj"])):
        np.testing.assert_array_equal(asnumpy(t.model.buffers()[k]), v, err_msg=k)
    assert t.model.buffers()["fixed.perm"].dtype == np.int32

    def closed(p, x):  # the same function with the fixed leaves as constants of its closure
        return asm.jax_apply({"fixed": given["fixed"], "fc": p}, x)

    jax.config.update("jax_enable_x64", True)
    c = _fit(nn.Jax(closed, given["fc"]))
    np.testing.assert_allclose(t.history["train_loss"], c.history["train_loss"], rtol=1e-12)
    for k in ("fc.b", "fc.w"):
        np.testing.assert_allclose(asnumpy(t.params[k]), asnumpy(c.params[k[3:]]), rtol=1e-12, err_msg=k)
    path = t.save_results(str(tmp_path / "r.h5"))
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["/buffers/fixed.perm"][()], given["fixed"]["perm"])
        assert sorted(f["/model"]) == ["fc.b", "fc.w"]
    tree = m.tree(t.params)
    np.testing.assert_array_equal(tree["fixed"]["proj"], given["fixed"]["proj"])
    np.testing.assert_array_equal(tree["fc"]["w"], asnumpy(t.params["fc.w"]))


@JAX
def test_the_mask_is_optax_s_a_prefix_a_whole_tree_or_a_function_and_a_bad_one_is_one_line():
    """trainable= as optax.masked takes it: a prefix of the pytree, its whole structure, or a function of the
    pytree giving one; anything else, or a mask that trains nothing, is one agreed line."""
    from hpcgpu import nn
    from hpcgpu.errors import AgreedError

    p = asm.jax_params(1)
    whole = {"fixed": {"proj": True, "perm": False}, "fc": {"w": True, "b": False}}
    assert nn.Jax(asm.jax_apply, p, trainable=whole).names == ["fc.w", "fixed.proj"]
    assert nn.Jax(asm.jax_apply, p, trainable=lambda tree: {"fixed": False, "fc": True}).names == ["fc.b", "fc.w"]
    structure = ("Jax: trainable must be True or a pytree of True/False with the structure of params or a prefix "
                 "of it (optax.masked's mask), got ")
    for bad, got in (({"fixed": False}, "a mask of another structure"), ([True, False], "a mask of another structure"),
                     ("fc", "a str"), ({"fixed": 0, "fc": 1}, "a dict")):
        with pytest.raises(TypeError) as e:
            nn.Jax(asm.jax_apply, p, trainable=bad)
        assert isinstance(e.value, AgreedError) and str(e.value) == structure + got
    with pytest.raises(TypeError) as e:
        nn.Jax(asm.jax_apply, p, trainable=False)
    assert isinstance(e.value, AgreedError)
    assert str(e.value) == "Jax: trainable marks no leaf of params as trained: nothing to train"


@JAX
def test_a_trained_leaf_that_is_not_floating_point_is_refused_in_one_line():
    """An int32 leaf left trainable would be trained as floats: one agreed line naming it and the mask."""
    from hpcgpu import nn
    from hpcgpu.errors import AgreedError

    with pytest.raises(TypeError) as e:
        nn.Jax(asm.jax_apply, asm.jax_params(1), trainable={"fixed": {"proj": False, "perm": True}, "fc": True})
    assert isinstance(e.value, AgreedError)
    assert str(e.value) == ("Jax: params leaf fixed.perm is int32, not floating point, and is trained: mark it "
                            "non-trainable (trainable=, a mask of params) or keep it in apply's closure")


@JAX
def test_a_checkpoint_and_load_weights_put_the_non_trainable_leaves_back(tmp_path):
    """1 epoch with a checkpoint resumed to 3 by a model of other leaves is the 3-epoch run, bitwise, its fixed
    leaves the checkpoint's; load_weights of the results file gives a third model the trained ones."""
    import hpcgpu

    ck = str(tmp_path / "ck.h5")
    whole = _fit(asm.jax_model(100))
    _fit(asm.jax_model(100), epochs=1, checkpoint=ck)
    resumed = _fit(asm.jax_model(300), checkpoint=ck, resume=True)
    assert resumed.resumed_from == ck and resumed.history["train_loss"] == whole.history["train_loss"]
    np.testing.assert_array_equal(asnumpy(resumed.model.params), asnumpy(whole.model.params))
    for k, v in whole.model.buffers().items():
        np.testing.assert_array_equal(asnumpy(resumed.model.buffers()[k]), asnumpy(v), err_msg=k)
    path = whole.save_results(str(tmp_path / "r.h5"))
    other = hpcgpu.Trainer(asm.jax_model(500), optimizer=optim.SGD(lr=0.05), **asm.COMMON)
    other.load_weights(path)
    X, _ = asm.data()
    np.testing.assert_array_equal(other.predict(X), whole.predict(X))
    np.testing.assert_array_equal(other.model.buffers()["fixed.perm"], asm.jax_params(100)["fixed"]["perm"])


@JAX
def test_mutable_leaves_are_updated_by_each_training_call_and_never_by_evaluation():
    """flax's mutable batch_stats: each training call's updates are the state of the next (every training row
    summed once an epoch, the rows counted), evaluation and prediction run with train=False and change nothing
    (fit with and without validation: bitwise the same model), a 0-d leaf stays 0-d."""
    import jax

    X, y = asm.data()
    m = asm.stats_model(100)
    t = _fit(m, drop_last=False, batch_size=70)
    assert m.mutable_names == ["batch_stats.count", "batch_stats.mean", "batch_stats.xsum"]
    b = t.model.buffers()
    assert b["batch_stats.count"].shape == () and int(b["batch_stats.count"]) == 3 * 240
    np.testing.assert_allclose(b["batch_stats.xsum"], 3 * X.sum(0), rtol=1e-12, atol=1e-12)
    assert np.abs(b["batch_stats.mean"]).max() > 1e-3
    Xv, yv = X[:50] + 1.0, y[:50]
    import hpcgpu

    v = hpcgpu.Trainer(asm.stats_model(100), optimizer=optim.SGD(lr=0.05, momentum=0.9),
                       **{**asm.COMMON, "drop_last": False, "batch_size": 70})
    v.fit((X, y), validation=(Xv, yv))
    assert len(v.history["val_loss"]) == 3
    np.testing.assert_array_equal(asnumpy(v.model.params), asnumpy(t.model.params))
    for k, want in b.items():
        np.testing.assert_array_equal(v.model.buffers()[k], want, err_msg=k)
    before = {k: a.copy() for k, a in b.items()}
    t.evaluate((Xv, yv))
    pred = t.predict(Xv)
    for k, want in before.items():
        np.testing.assert_array_equal(t.model.buffers()[k], want, err_msg=k)
    tree = m.tree(t.params)
    assert tree["batch_stats"]["count"].shape == ()
    want = asm.stats_apply(jax.tree_util.tree_map(np.asarray, tree), Xv, False)
    np.testing.assert_allclose(asnumpy(pred), np.asarray(want), rtol=1e-12, atol=1e-12)


@JAX
def test_a_bad_mutable_or_a_training_call_breaking_its_contract_is_one_line():
    """mutable= naming nothing non-trainable, of a bad type, or True with no state: one agreed line at
    construction; a training call not returning (outputs, updates), or updates of a leaf mutable= does not name,
    or of another shape: one line at the first step."""
    import jax.numpy as jnp

    from hpcgpu import nn
    from hpcgpu.errors import AgreedError

    p, mask = asm.stats_params(1), {"params": True, "batch_stats": False}
    for bad, line in (
            ("params.w1", "Jax: mutable names 'params.w1', which is no non-trainable leaf or subtree of params "
                          "(it is trained: mark it non-trainable with trainable=)"),
            ("stats", "Jax: mutable names 'stats', which is no non-trainable leaf or subtree of params"),
            (3, "Jax: mutable must be False, True, or the path names of non-trainable subtrees (\"batch_stats\", "
                "[\"bn1.mean\", \"bn1.var\"]), got 3")):
        with pytest.raises(TypeError) as e:
            nn.Jax(asm.stats_apply, p, trainable=mask, mutable=bad)
        assert isinstance(e.value, AgreedError) and str(e.value) == line
    with pytest.raises(TypeError) as e:
        nn.Jax(lambda v, x, train: x @ v["w"], {"w": np.zeros((6, 3))}, mutable=True)
    assert str(e.value) == ("Jax: mutable=True but no leaf of params is non-trainable (trainable=): nothing for a "
                            "step to update")
    assert nn.Jax(asm.stats_apply, p, trainable=mask, mutable=["batch_stats.count"]).constant_buffers() == \
        {"batch_stats.mean", "batch_stats.xsum"}

    def outputs_only(v, x, train):
        return x @ v["params"]["w1"] @ v["params"]["w2"]

    def a_trained_leaf(v, x, train):
        out = x @ v["params"]["w1"] @ v["params"]["w2"]
        return (out, {"params": {"w2": v["params"]["w2"]}}) if train else out

    def another_shape(v, x, train):
        out = x @ v["params"]["w1"] @ v["params"]["w2"]
        return (out, {"batch_stats": {"mean": jnp.zeros(3)}}) if train else out

    for fn, line in ((outputs_only, "Jax: outputs_only(params, x, train=True) returned an array, not "
                                    "(outputs, updates): with mutable=, a training call returns the outputs and the "
                                    "updated leaves, as flax's apply(..., mutable=[...]) does"),
                     (a_trained_leaf, "Jax: apply's updates hold params.w2, which is no leaf mutable= names "
                                      "(batch_stats.count, batch_stats.mean, batch_stats.xsum)"),
                     (another_shape, "Jax: apply's updates give batch_stats.mean the shape (3,), not (8,)")):
        with pytest.raises(TypeError) as e:
            _fit(nn.Jax(fn, asm.stats_params(1), trainable=mask, mutable="batch_stats"))
        assert line in str(e.value), str(e.value)


@pytest.mark.parametrize("kind", [pytest.param("torch", marks=TORCH)])
def test_integer_features_from_an_hdf5_file_reach_an_embedding_as_int64(kind, tmp_path):
    """fit('file.h5') of int64 features trains an Embedding first layer (float indices would be refused by
    PyTorch), the same model as the same integer arrays; the file's /test split is its held-out set, and
    floating features afterwards are one agreed line."""
    from hpcgpu.errors import AgreedError

    path = asm.write_indices(str(tmp_path / "indices.h5"))
    from_file = _fit(asm.embedding_model(), path)
    X, y = asm.indices()
    from_arrays = _fit(asm.embedding_model(), (X[:200], y[:200]))
    assert from_file.history["train_loss"] == from_arrays.history["train_loss"]
    np.testing.assert_array_equal(asnumpy(from_file.model.params), asnumpy(from_arrays.model.params))
    assert len(from_file.history["test_loss"]) == asm.COMMON["epochs"]
    assert from_file.evaluate((X[200:], y[200:]))["loss"] == from_file.history["test_loss"][-1]
    with pytest.raises(ValueError) as e:
        from_file.evaluate((X.astype(np.float64), y))
    assert isinstance(e.value, AgreedError)
    assert str(e.value) == "model Torch takes integer features (those it was first given), got floating ones"


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [3])
@pytest.mark.skipif(not (HAS_JAX and HAS_TORCH), reason="needs jax and PyTorch")
@_mpi.torch_device()
def test_per_rank_leaves_and_an_hdf5_of_indices_give_the_one_rank_model(nprocs, tmp_path):
    """Every rank's JAX leaves from its own seed (the fixed ones too): every rank trains the 1-rank model of rank
    0's seed, with its fixed leaves; a checkpoint resumed by models of other leaves is the whole run, bitwise, on
    every rank; the Embedding trained from the HDF5 file of indices is the 1-rank one on every rank."""
    asm.write_indices(str(tmp_path / "indices.h5"))
    p = _mpi.run(nprocs, [os.path.join(os.path.dirname(__file__), "autograd_state_models.py"), str(tmp_path)],
                 timeout=300)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["jax_resumed_bitwise"]
    one = _fit(asm.jax_model(100))
    np.testing.assert_allclose(got["jax_loss"], one.history["train_loss"], rtol=1e-10)
    for rank in got["jax"]:
        for k, v in one.params.items():
            np.testing.assert_allclose(rank["params"][k], asnumpy(v), rtol=1e-9, atol=1e-12, err_msg=k)
        for k, v in one.model.buffers().items():
            np.testing.assert_array_equal(rank["buffers"][k], asnumpy(v), err_msg=k)
    # running statistics: each step starts from data rank 0's, which rank 0 updates from its own 10 rows (3 epochs
    # of 8 steps: it counted 240 rows, not the 720 of all ranks); every rank holds rank 0's after fit and predict
    counts = [int(r["batch_stats.count"]) for r in got["stats_after_fit"]]
    assert counts == [240, 240, 240], counts
    assert all(r == got["stats"][0] for r in (*got["stats"], *got["stats_after_fit"]))
    emb = _fit(asm.embedding_model(), str(tmp_path / "indices.h5"))
    np.testing.assert_allclose(got["embedding_history"]["train_loss"], emb.history["train_loss"], rtol=1e-10)
    np.testing.assert_allclose(got["embedding_history"]["test_loss"], emb.history["test_loss"], rtol=1e-10)
    for rank in got["embedding"]:
        for k, v in emb.params.items():
            np.testing.assert_allclose(rank["params"][k], asnumpy(v), rtol=1e-9, atol=1e-12, err_msg=k)
