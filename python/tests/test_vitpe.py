"""The Python module against the library's goldens and its own command: forward parity with
timm's logits, classify equal to `vitpe classify --json`, embed equal to the features pass, and
every error path (wrong dtype, shape, layout, missing file, bad image) as a Python exception
with the library's message. Run by ctest (python_module) with PYTHONPATH at build/python."""
import json
import os
import signal
import struct
import subprocess
import threading
import time

import numpy as np
import pytest

import vitpe

DATA = os.environ.get("VITPE_TEST_DATA", os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data"))
BINARY = os.environ.get("VITPE_BINARY_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
SOURCE = os.environ.get("VITPE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUNDLED = os.path.join(SOURCE, "models", "vit-fmnist.safetensors")
IMAGES = [os.path.join(DATA, "images", n) for n in ("gray_40x52.png", "rgb_20x14.png")]


def read_safetensors(path):
    """A safetensors file's F32 and BF16 tensors as float32 numpy arrays (no extra package)."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        blob = raw[8 + n + begin:8 + n + end]
        if t["dtype"] == "F32":
            a = np.frombuffer(blob, dtype="<f4")
        elif t["dtype"] == "BF16":
            a = (np.frombuffer(blob, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            continue
        out[name] = a.reshape(t["shape"]).astype(np.float32)
    return out


def test_version_is_the_commands():
    out = subprocess.run([os.path.join(BINARY, "vitpe"), "--version"], capture_output=True,
                         text=True, check=True).stdout
    assert vitpe.version() in out
    assert vitpe.__version__ == vitpe.version()


def test_forward_matches_timms_logits_at_two_sizes():
    model = vitpe.load(os.path.join(DATA, "vit_timm.safetensors"), heads=4)
    assert model.format == "timm ViT"
    assert model.config["encoding"] == "learned1d"
    io = read_safetensors(os.path.join(DATA, "vit_timm_io.safetensors"))
    for x, want in (("input", "logits"), ("input_48x48", "logits_48x48")):
        got = model.forward(np.ascontiguousarray(io[x]))
        np.testing.assert_allclose(got, io[want], rtol=1e-4, atol=1e-5)


def test_features_are_one_pass_of_tokens_pooled_and_logits():
    model = vitpe.load(BUNDLED)
    x = np.stack([model.preprocess(p) for p in IMAGES])
    f = model.features(x)
    assert f["tokens"].shape == (2, 49, 128) and f["prefix"] == 0 and f["grid"] == (7, 7)
    assert f["pooled"].shape == (2, 128)
    np.testing.assert_allclose(f["logits"], model.forward(x), rtol=1e-5, atol=1e-6)


def test_classify_equals_the_commands_json():
    clf = vitpe.Classifier(BUNDLED)
    got = clf.classify(IMAGES, k=3)
    out = subprocess.run([os.path.join(BINARY, "vitpe"), "classify", "--json", "--topk", "3",
                          "--model", BUNDLED] + IMAGES, capture_output=True, text=True,
                         check=True).stdout
    want = json.loads(out)
    assert len(got) == len(want) == 2
    for g, w in zip(got, want):
        assert [p["index"] for p in g] == [p["index"] for p in w["top"]]
        assert [p["label"] for p in g] == [p["label"] for p in w["top"]]
        np.testing.assert_allclose([p["probability"] for p in g],
                                   [p["probability"] for p in w["top"]], rtol=1e-5)
    # One image (not a list) gives one list of predictions; an array in RGB order too.
    one = clf.classify(IMAGES[1], k=1)
    assert one[0]["label"] == got[1][0]["label"]


def test_embed_gives_the_pooled_features_and_unit_rows():
    clf = vitpe.Classifier(BUNDLED)
    e = clf.embed(IMAGES)
    model = vitpe.load(BUNDLED)
    x = np.stack([model.preprocess(p) for p in IMAGES])
    np.testing.assert_allclose(e, model.features(x)["pooled"], rtol=1e-5, atol=1e-6)
    u = clf.embed(IMAGES, normalize=True)
    np.testing.assert_allclose(np.linalg.norm(u, axis=1), 1.0, rtol=1e-5)


def test_streams_give_the_same_answers():
    one = vitpe.Classifier(BUNDLED, threads=2)
    two = vitpe.Classifier(BUNDLED, threads=2, streams=2)
    assert (one.streams, two.streams) == (1, 2)
    a, b = one.classify(IMAGES, k=1), two.classify(IMAGES, k=1)
    assert [p[0]["label"] for p in a] == [p[0]["label"] for p in b]
    np.testing.assert_allclose(two.embed(IMAGES), one.embed(IMAGES), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="streams"):
        vitpe.Classifier(BUNDLED, streams=0)


def test_packed_weights_give_the_same_features():
    packed = vitpe.Classifier(BUNDLED, threads=2)
    plain = vitpe.Classifier(BUNDLED, threads=2, pack_weights=False)
    # Packing changes the weights' layout, not a product's order: the same numbers.
    np.testing.assert_array_equal(packed.embed(IMAGES), plain.embed(IMAGES))


def test_arrays_in_rgb_order_equal_the_files():
    clf = vitpe.Classifier("vit-fmnist")
    rgb = np.zeros((30, 20, 3), dtype=np.uint8)
    rgb[:, :10, 0] = 255  # red left half
    bgr = np.ascontiguousarray(rgb[:, :, ::-1])
    np.testing.assert_allclose(clf.embed(rgb), clf.embed(bgr, bgr=True), rtol=1e-6)


def test_bad_inputs_are_python_errors_with_the_librarys_message():
    model = vitpe.load("vit-fmnist")
    with pytest.raises(ValueError, match=r"expected a C-contiguous float32 array \[B, 1, H, W\].*float64"):
        model.forward(np.zeros((1, 1, 28, 28)))
    with pytest.raises(ValueError, match=r"found float32 array of shape \(1, 3, 28, 28\)"):
        model.forward(np.zeros((1, 3, 28, 28), dtype=np.float32))
    with pytest.raises(ValueError, match="non-contiguous"):
        model.forward(np.zeros((1, 1, 28, 56), dtype=np.float32)[:, :, :, ::2])
    with pytest.raises(RuntimeError, match="missing.safetensors"):
        vitpe.load("/nonexistent/missing.safetensors")
    with pytest.raises(RuntimeError, match="neither a checkpoint file nor a preset"):
        vitpe.load("vit_no_such_model")
    clf = vitpe.Classifier("vit-fmnist")
    with pytest.raises(RuntimeError, match="nonexistent.png"):
        clf.classify("/nonexistent.png")
    with pytest.raises(ValueError, match="expected a C-contiguous uint8 array"):
        clf.classify(np.zeros((4, 4), dtype=np.float32))
    with pytest.raises(ValueError, match="expected a file path or a numpy uint8 array"):
        clf.classify(42)


def test_the_encodings_registry():
    kinds = {k["name"]: k for k in vitpe.encodings.list()}
    assert {"none", "learned1d", "sincos2d", "relbias", "rope-mixed", "alibi2d"} <= set(kinds)
    assert kinds["relbias"]["site"] == "attention"
    assert kinds["learned1d"]["site"] == "token"


def test_encoding_tables_as_arrays():
    table = vitpe.encodings.table("sincos2d", grid=(3, 5), dim=16, prefix=1)
    assert table.shape == (16, 16) and table.dtype == np.float32
    sim = vitpe.encodings.similarity("sincos2d", grid=(3, 5), dim=16)
    patches = table[1:] / np.linalg.norm(table[1:], axis=1, keepdims=True)
    np.testing.assert_allclose(sim, patches @ patches.T, atol=1e-5)
    np.testing.assert_allclose(np.diag(sim), 1.0, atol=1e-5)
    bias = vitpe.encodings.attention("alibi2d", grid=(3, 4), heads=2, head_dim=8)
    assert bias.shape == (2, 12, 12)
    assert np.all(np.diag(bias[0]) == 0) and bias[0, 0, 11] < 0  # a penalty growing with distance
    score = vitpe.encodings.attention("rope-axial", grid=(3, 4), heads=2, head_dim=8, prefix=1)
    assert score.shape == (2, 13, 13)
    np.testing.assert_allclose(np.diag(score[0]), 1.0, atol=1e-5)  # a rotation keeps the norm
    assert score[0, 1, 12] < 0.99  # and turns distant patches apart
    with pytest.raises(ValueError, match="has no token part"):
        vitpe.encodings.table("relbias")
    with pytest.raises(ValueError, match="unknown positional encoding"):
        vitpe.encodings.attention("nope")


# A tiny run of the procedural dataset: 2 steps an epoch, seconds in all.
TINY = dict(dataset="procedural", size=16, subset=64, test_subset=32, batch=32, seed=3,
            set=["depth=1", "dim=32", "heads=2", "mlp_dim=64"])


def test_train_reports_progress_and_returns_the_history_and_model():
    seen = []
    r = vitpe.train(encoding="sincos2d", epochs=2, progress=seen.append, **TINY)
    steps = [p for p in seen if p["epoch_done"] is None]
    assert [(p["epoch"], p["batch"], p["batches"]) for p in steps] == [
        (1, 1, 2), (1, 2, 2), (2, 1, 2), (2, 2, 2)]
    assert steps[-1]["step"] == 4 and steps[0]["encoding"] == "sincos2d"
    done = [p["epoch_done"] for p in seen if p["epoch_done"] is not None]
    assert r["finished"] and r["history"] == done and len(done) == 2
    assert r["config"]["encoding"] == "sincos2d" and r["params"] > 0
    x = np.zeros((2, r["config"]["channels"], 16, 16), np.float32)
    assert r["model"].forward(x).shape == (2, r["config"]["classes"])
    with pytest.raises(TypeError, match="unknown keyword 'epoch'.*accepted: model, encoding"):
        vitpe.train(epoch=3)
    with pytest.raises(TypeError, match="expected None, True or a callable"):
        vitpe.train(progress=3, **TINY)
    with pytest.raises(ValueError):
        vitpe.train(encoding="nope", **TINY)


def test_fine_tuning_and_crop_keywords_are_the_flags():
    # Scale augmentation and the fine-tuning recipe reach the trainer (a bad value is its error).
    r = vitpe.train(encoding="sincos2d", epochs=1, scale=(0.5, 1.0), ratio=(0.8, 1.25),
                    layer_decay=0.75, freeze="head", head_lr=1e-3, **TINY)
    assert r["finished"]
    with pytest.raises(ValueError, match="--scale 0.9"):
        vitpe.train(epochs=1, scale=(0.9, 0.5), **TINY)
    with pytest.raises(ValueError, match="--layer-decay"):
        vitpe.train(epochs=1, layer_decay=2.0, **TINY)
    # Multi-resolution batches, and a size the patch does not divide.
    assert vitpe.train(epochs=1, train_sizes=[12, 20], **TINY)["finished"]
    with pytest.raises(ValueError, match="--train-sizes 18: expected a positive multiple"):
        vitpe.train(epochs=1, train_sizes=[16, 18], **TINY)


def test_an_exception_in_the_callback_and_ctrl_c_stop_the_run():
    def stop(p):
        raise RuntimeError("enough at step %d" % p["step"])

    with pytest.raises(RuntimeError, match="enough at step 1"):
        vitpe.train(epochs=1, progress=stop, **TINY)
    # SIGINT while the library trains (the GIL released, no callback): the next step stops.
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            vitpe.train(epochs=100000, **TINY)
    finally:
        timer.cancel()
    assert time.monotonic() - start < 30


def test_compare_returns_what_the_command_writes(tmp_path):
    settings = dict(TINY, epochs=1, encodings=["none", "sincos2d"], seeds=[1], eval_sizes=[24],
                    pictures=False)
    ours = vitpe.compare(str(tmp_path / "py"), **settings)
    with open(tmp_path / "py" / "results.json") as f:
        assert json.load(f)["runs"] == ours["runs"]
    cli = [os.path.join(BINARY, "vitpe"), "compare", "--dataset", "procedural", "--size", "16",
           "--subset", "64", "--test-subset", "32", "--batch", "32", "--seed", "3",
           "--epochs", "1", "--encodings", "none,sincos2d", "--seeds", "1", "--eval-sizes", "24",
           "--no-pictures", "--no-progress", "--out", str(tmp_path / "cli")]
    for s in TINY["set"]:
        cli += ["--set", s]
    subprocess.run(cli, check=True, capture_output=True)
    with open(tmp_path / "cli" / "results.json") as f:
        theirs = json.load(f)
    assert len(ours["runs"]) == 2
    for a, b in zip(ours["runs"], theirs["runs"]):
        assert a["encoding"] == b["encoding"]
        for key in ("accuracy", "loss", "params"):
            assert a[key] == b[key], key
    with pytest.raises(TypeError, match="unknown keyword 'sizes'"):
        vitpe.compare(str(tmp_path / "x"), sizes=[1])
