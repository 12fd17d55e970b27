#!/usr/bin/env python3
"""Stronger CPU peers for `vitpe bench --vs-peers`: timm's model of a vitpe preset, timed in
PyTorch 2.x eager (inference_mode), torch.compile (inductor), ONNX Runtime (CPUExecutionProvider)
and OpenVINO (f32), on the same threads, batches and input size as vitpe's own measurement.

Method (that of ../shared/peers/cpu_peers.py): timm.create_model(name, pretrained=False) in eval
mode, a fixed random input (seed 0); ONNX Runtime and OpenVINO run the model exported by
torch.onnx.export (opset 17, the TorchScript exporter: dynamo=False) at each batch's static
shape; ONNX Runtime with intra_op threads = THREADS and one inter-op thread; OpenVINO's
compile_model with INFERENCE_NUM_THREADS = THREADS, PERFORMANCE_HINT LATENCY and
INFERENCE_PRECISION_HINT f32 (no bf16 on CPUs that have it: vitpe's figures are f32); above
batch 1 also openvino-tput, OpenVINO's THROUGHPUT hint (its own streams) with an async queue of
its optimal number of single-image requests, a batch of B being B requests (what its
benchmark_app runs, and what a user maximising images/s runs). With
--with-int8 (vitpe's int8 runs) one more: onnxruntime-int8, ONNX Runtime on the model that
onnxruntime.quantization.quantize_dynamic makes of that export (per-channel s8 weights with
reduce_range, i.e. 7 bits as vitpe's, u8 activations quantised at run time). Each
(runtime, batch): its model is built (the export; torch.compile's compile, in a first call of its
own), WARMUP untimed runs, then REPS timed runs; median, min and max in ms. A runtime that fails (not installed, no compiler for torch.compile, an
export it cannot read) is recorded with its error and the others go on.

Prints ONE JSON object on stdout (progress goes to stderr):
  {"model", "img_size": [H, W], "threads", "reps": [per batch], "warmup", "versions": {...},
   "results": [{"runtime", "batch", "median_ms", "min_ms", "max_ms", "img_per_s",
                "setup_s"} or {"runtime", "batch", "error"}, ...]}
setup_s: the time to build the runtime's model at that batch (export, compile) and warm up.
Needs the venv of scripts/peers-setup; never needed by the tests.

usage: peers_bench.py --model TIMM_NAME [--batches 1,8] [--threads 2] [--reps 10 | 10,5]
                      [--img-size 224 | 224x160] [--runtimes torch-eager,torch-compile,...]
                      [--with-int8]
"""
import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings

RUNTIMES = ("torch-eager", "torch-compile", "onnxruntime", "openvino-f32", "openvino-tput")
INT8_RUNTIMES = ("onnxruntime-int8",)  # added by --with-int8


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="timm model name, e.g. vit_small_patch16_224")
    ap.add_argument("--batches", default="1,8", help="batch sizes, comma separated")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    ap.add_argument("--reps", default="10",
                    help="timed runs per (runtime, batch): one number, or one per batch")
    ap.add_argument("--warmup", type=int, default=2, help="untimed runs before them")
    ap.add_argument("--img-size", default="224", help="N or ROWSxCOLS")
    ap.add_argument("--runtimes", default=",".join(RUNTIMES), help="a subset of " + ",".join(RUNTIMES))
    ap.add_argument("--with-int8", action="store_true",
                    help="also " + ",".join(INT8_RUNTIMES) + " (for vitpe's int8 runs)")
    a = ap.parse_args()
    a.batches = [int(b) for b in a.batches.split(",")]
    a.reps = [int(r) for r in a.reps.split(",")]
    if len(a.reps) == 1:
        a.reps *= len(a.batches)
    if len(a.reps) != len(a.batches):
        ap.error(f"--reps: {len(a.reps)} numbers for {len(a.batches)} batches")
    rows, _, cols = a.img_size.partition("x")
    a.img_size = (int(rows), int(cols or rows))
    a.runtimes = a.runtimes.split(",") + (list(INT8_RUNTIMES) if a.with_int8 else [])
    unknown = [r for r in a.runtimes if r not in RUNTIMES + INT8_RUNTIMES]
    if unknown:
        ap.error(f"unknown runtime(s) {unknown}; known: {', '.join(RUNTIMES)}")
    if min(a.batches) < 1 or min(a.reps) < 1 or a.warmup < 0 or a.threads < 1:
        ap.error("batches, reps and threads must be positive, warmup at least 0")
    return a


def log(msg):
    print(f"peers: {msg}", file=sys.stderr, flush=True)


def error_text(e):
    """The exception's type and first line: torch.compile's and OpenVINO's run to pages."""
    lines = [line for line in str(e).strip().splitlines() if line.strip()]
    return f"{type(e).__name__}: {lines[0][:400] if lines else ''}".rstrip(": ")


def time_runs(fn, reps):
    """Seconds of each of `reps` calls of fn."""
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return ts


def row(runtime, batch, ts, setup_s):
    med = statistics.median(ts)
    return {"runtime": runtime, "batch": batch, "median_ms": med * 1e3, "min_ms": min(ts) * 1e3,
            "max_ms": max(ts) * 1e3, "img_per_s": batch / med, "setup_s": setup_s}


# Each runner builds its runtime's model for input x (a torch tensor) and returns the call to time.
def torch_eager(torch, model, x, a, tmp):
    def run():
        with torch.inference_mode():
            model(x)
    return run


def torch_compile(torch, model, x, a, tmp):
    compiled = torch.compile(model, dynamic=False)

    def run():
        with torch.inference_mode():
            compiled(x)
    run()  # the compile itself, inside setup_s and outside the warm-up count
    return run


def export_onnx(torch, model, x, tmp):
    path = os.path.join(tmp, f"model_b{x.shape[0]}.onnx")
    if os.path.exists(path):
        return path

    def export():
        with torch.no_grad():
            torch.onnx.export(model, (x,), path, opset_version=17, dynamo=False,
                              input_names=["x"], output_names=["logits"])

    try:
        export()
    except TypeError as e:
        # timm's Eva (DINOv3, RoPE-ViT) passes is_causal to F.scaled_dot_product_attention, which
        # the TorchScript tracer records as a tensor: export its attention's explicit path
        # (fused_attn off: the same matmul, softmax, matmul) instead, then restore the flag.
        fused = [m for m in model.modules() if getattr(m, "fused_attn", False)]
        if "is_causal" not in str(e) or not fused:
            raise
        print("peers: exporting with timm's unfused attention (the tracer cannot record "
              "is_causal)", file=sys.stderr)
        for m in fused:
            m.fused_attn = False
        try:
            export()
        finally:
            for m in fused:
                m.fused_attn = True
    return path


def onnxruntime(torch, model, x, a, tmp, path=None):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    s = ort.InferenceSession(path or export_onnx(torch, model, x, tmp), so,
                             providers=["CPUExecutionProvider"])
    feed = {s.get_inputs()[0].name: x.numpy()}
    return lambda: s.run(None, feed)


def onnxruntime_int8(torch, model, x, a, tmp):
    from onnxruntime.quantization import QuantType, quantize_dynamic
    f32 = export_onnx(torch, model, x, tmp)
    path = f32.replace(".onnx", "_int8.onnx")
    quantize_dynamic(f32, path, weight_type=QuantType.QInt8, per_channel=True, reduce_range=True)
    return onnxruntime(torch, model, x, a, tmp, path)


def openvino_f32(torch, model, x, a, tmp):
    import openvino as ov
    compiled = ov.Core().compile_model(export_onnx(torch, model, x, tmp), "CPU", {
        "INFERENCE_NUM_THREADS": a.threads, "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_PRECISION_HINT": "f32"})
    req = compiled.create_infer_request()
    xn = x.numpy()
    return lambda: req.infer({0: xn})


def openvino_throughput(torch, model, x, a, tmp):
    import openvino as ov
    compiled = ov.Core().compile_model(export_onnx(torch, model, x[:1], tmp), "CPU", {
        "INFERENCE_NUM_THREADS": a.threads, "PERFORMANCE_HINT": "THROUGHPUT",
        "INFERENCE_PRECISION_HINT": "f32"})
    requests = compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")
    log(f"  openvino-tput: {requests} requests in flight")
    queue = ov.AsyncInferQueue(compiled, requests)
    x1 = x[:1].numpy()

    def run():
        for _ in range(x.shape[0]):
            queue.start_async({0: x1})
        queue.wait_all()
    return run


RUNNERS = {"torch-eager": torch_eager, "torch-compile": torch_compile,
           "onnxruntime": onnxruntime, "openvino-f32": openvino_f32,
           "openvino-tput": openvino_throughput,
           "onnxruntime-int8": onnxruntime_int8}


def versions():
    out = {"python": sys.version.split()[0]}
    for name in ("torch", "timm", "onnx", "onnxruntime", "openvino"):
        try:
            out[name] = __import__(name).__version__
        except Exception as e:  # a missing package is the runtime's error, reported there
            out[name] = None if isinstance(e, ImportError) else error_text(e)
    return out


def main():
    a = parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    # The TorchScript exporter's deprecation and tracer warnings, and the CUDA wheel's "no CUDA
    # runtime" from torch.compile, would bury the progress lines; errors are still recorded.
    warnings.filterwarnings("ignore")
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    out = {"model": a.model, "img_size": list(a.img_size), "threads": a.threads, "reps": a.reps,
           "warmup": a.warmup, "versions": versions(), "results": []}
    try:
        import timm
        import torch
        torch.set_num_threads(a.threads)
        torch.manual_seed(0)
        model = timm.create_model(a.model, pretrained=False, img_size=a.img_size).eval()
    except Exception as e:  # no model: every row says why
        out["results"] = [{"runtime": r, "batch": b, "error": error_text(e)}
                          for r in a.runtimes for b in a.batches]
        print(json.dumps(out), flush=True)
        return
    with tempfile.TemporaryDirectory(prefix="vitpe-peers-") as tmp:
        for b, reps in zip(a.batches, a.reps):
            x = torch.randn(b, 3, *a.img_size)
            for runtime in a.runtimes:
                if runtime == "openvino-tput" and b == 1:
                    continue  # one request: the latency mode's measurement
                log(f"{a.model} batch {b}: {runtime}")
                t0 = time.perf_counter()
                try:
                    fn = RUNNERS[runtime](torch, model, x, a, tmp)
                    for _ in range(a.warmup):
                        fn()
                    setup_s = time.perf_counter() - t0
                    out["results"].append(row(runtime, b, time_runs(fn, reps), setup_s))
                except Exception as e:
                    out["results"].append({"runtime": runtime, "batch": b, "error": error_text(e)})
                    log(f"  {runtime} failed: {out['results'][-1]['error']}")
                fn = None
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
