#!/usr/bin/env python3
"""The HiFT vocoder's convolutions through cuDNN (PyTorch) on the same GPU, for the choice
"cuDNN or our own convolutions, whichever measures faster" (the GPU vocoder's design choice).

Builds the official CausalHiFTGenerator with the model file's weights (run_official.py's
builder; the official code stays in the ignored .dev/official), then times hift.decode() -- the
conv stack: conv_pre, 3 upsampling stages, 9 + 3 resblocks, the source branches, conv_post and
the iSTFT head -- for the two call sizes of a W1 request (T = 100 mel frames streaming, T = 224
final), captured in a CUDA graph (no Python overhead left), cudnn.benchmark on, in three
precisions: fp32 (allow_tf32 off), TF32 (PyTorch's default for cuDNN convolutions) and, for
reference, bf16 autocast. Compare with our gpu_hift_infer timings (tests/test_gpu_hift, which
also include the fp64 F0 predictor and the source: ~0.5 ms of ours).

  python3 bench/official/hift_cudnn.py --model build/dev/full-bf16.gguf [--out hift_cudnn.json]
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_official as ro  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def time_eager(fn, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


CALLS = []


def conv_sum(hift, run, reps=30):
    """GPU time of every Conv1d / ConvTranspose1d call of one decode, each repeated back to back
    (queued launches, so the events measure the kernels, not Python), summed."""
    CALLS.clear()
    hooks = [m.register_forward_hook(lambda mod, inp, out: CALLS.append((mod, inp[0].detach())))
             for m in hift.modules() if isinstance(m, (torch.nn.Conv1d, torch.nn.ConvTranspose1d))]
    run()
    for h in hooks:
        h.remove()
    total = 0.0
    for mod, x in CALLS:
        for _ in range(3):
            mod(x)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            mod(x)
        b.record()
        b.synchronize()
        total += a.elapsed_time(b) / reps
    return total


def time_graph(fn, reps=50):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--official", default=os.path.join(REPO, ".dev", "official"))
    ap.add_argument("--out")
    a = ap.parse_args()
    ro.install_stubs()
    off = ro.import_official(a.official)
    _, _, hift, _, _ = ro.build_models(off, a.model)
    hift = hift.cuda().eval()
    # the official module keeps its STFT window on the CPU and copies it per call, which a CUDA
    # graph cannot hold: keep it on the device (same values)
    hift.stft_window = hift.stft_window.cuda()
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    res = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version()}
    for T, fin in ((100, False), (224, True)):
        mel = torch.randn(1, 80, T, device="cuda")
        with torch.no_grad():
            hift.f0_predictor.to(torch.float64)
            f0 = hift.f0_predictor(mel.double(), finalize=fin).float()
            s = hift.f0_upsamp(f0[:, None]).transpose(1, 2)
            s, _, _ = hift.m_source(s)
            s = s.transpose(1, 2).contiguous()
            x = mel if fin else mel[:, :, :-hift.f0_predictor.condnet[0].causal_padding].contiguous()
            for prec in ("fp32", "tf32"):
                torch.backends.cudnn.allow_tf32 = prec == "tf32"
                torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
                if prec == "bf16":
                    def run():
                        with torch.autocast("cuda", dtype=torch.bfloat16):
                            hift.decode(x=x, s=s, finalize=fin)
                else:
                    def run():
                        hift.decode(x=x, s=s, finalize=fin)
                eager = time_eager(run)
                convs = conv_sum(hift, run)
                res[f"convs_T{T}_{'final' if fin else 'stream'}_{prec}_ms"] = convs
                print(f"cuDNN (PyTorch {torch.__version__}) T={T:4d} "
                      f"{'final ' if fin else 'stream'} {prec}: the {len(CALLS)} convolutions of "
                      f"one decode, each timed back to back: {convs:.3f} ms", flush=True)
                try:
                    ms = time_graph(run)
                except Exception as e:  # capture refused: only the eager time
                    ms = None
                    print(f"T={T} {prec}: {type(e).__name__}: {e}", flush=True)
                key = f"decode_T{T}_{'final' if fin else 'stream'}_{prec}"
                res[key + "_graph_ms"] = ms
                res[key + "_eager_ms"] = eager
                print(f"cuDNN (PyTorch {torch.__version__}) hift.decode T={T:4d} "
                      f"{'final ' if fin else 'stream'} {prec}: "
                      f"{'-' if ms is None else f'{ms:.3f} ms'} (CUDA graph), {eager:.3f} ms "
                      f"(eager)", flush=True)
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(res, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
