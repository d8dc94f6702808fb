#!/usr/bin/env python3
"""Make the resampling golden data (tests/data/resample/): what the official front end's load_wav
(torchaudio.transforms.Resample(orig, new) with its defaults: sinc_interp_hann, lowpass_filter_width
6, rolloff 0.99) makes of real audio at the rates a prompt may have, and the speech tokenizer's
whisper log-mel of the 16 kHz result.

    python tools/golden_resample.py [--shared ../shared] [--out tests/data/resample]

Needs (run from an ignored folder's venv, never at library run time): torch, torchaudio, numpy and
the PyPI package s3tokenizer 0.3.0 (its log_mel_spectrogram is openai-whisper's; checked below
against the shared golden features). The exact command and versions are in
tests/data/resample/README.md.

Input: audio/cross_lingual_prompt.wav of the shared data (22.05 kHz int16, read as x / 32768 like
soundfile), its samples taken as audio at any rate R (the resampler only sees numbers and the two
rates; the content then sits at R / 22050 times its pitch):
  rs_R_to_O.npy  float32: Resample(R, O) of samples [RS_START, RS_START + RS_LEN),
                 R in 8000, 22050, 32000, 44100, 48000; O in 16000, 24000
  logmel_R.npy   float32 [128][T]: log_mel_spectrogram(Resample(R, 16000) of samples
                 [0, LM_LEN), n_mels=128) (the official _extract_speech_token), R in 22050, 44100
info.json: versions; for each file the largest difference from torchaudio.functional.resample,
which computes the kernel in float32 (transforms.Resample: in float64, all but the phase offsets
-i / new, which are float32), so the two differ by ~1e-5 for rates whose reduced new rate is not
a power of two (22.05 and 44.1 kHz).
"""
import argparse
import json
import os
import wave

import numpy as np
import torch
import torchaudio

RS_RATES = (8000, 22050, 32000, 44100, 48000)
RS_OUT = (16000, 24000)
RS_START, RS_LEN = 77175, 2400
LM_RATES = (22050, 44100)
LM_LEN = 44100


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.environ.get("COSY_SHARED", "../shared"))
    ap.add_argument("--out", default="tests/data/resample")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.set_num_threads(1)
    with wave.open(os.path.join(a.shared, "audio", "cross_lingual_prompt.wav")) as w:
        assert w.getsampwidth() == 2 and w.getnchannels() == 1
        x = np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768
    info = {"torch": torch.__version__, "torchaudio": torchaudio.__version__,
            "rs_start": RS_START, "rs_len": RS_LEN, "lm_len": LM_LEN, "files": {}}

    def resample(sig, r, o):
        t = torch.from_numpy(np.ascontiguousarray(sig))[None]
        y = torchaudio.transforms.Resample(orig_freq=r, new_freq=o)(t)[0].numpy()
        yf = torchaudio.functional.resample(t, r, o)[0].numpy()
        return y, float(np.abs(y - yf).max())

    for r in RS_RATES:
        for o in RS_OUT:
            y, d = resample(x[RS_START:RS_START + RS_LEN], r, o)
            name = f"rs_{r}_to_{o}.npy"
            np.save(os.path.join(a.out, name), y.astype(np.float32))
            info["files"][name] = {"samples": len(y), "peak": float(np.abs(y).max()),
                                   "functional_resample_max_abs_diff": d}

    from s3tokenizer.utils import log_mel_spectrogram
    fe = os.path.join(a.shared, "golden", "frontend")
    wav16 = torch.from_numpy(np.load(os.path.join(fe, "wav16k.npy")).astype(np.float32))
    ref = np.load(os.path.join(fe, "whisper_logmel.npy"))
    info["s3tokenizer_logmel_vs_golden_maxabs"] = float(
        np.abs(log_mel_spectrogram(wav16[None], n_mels=128).numpy() - ref).max())
    for r in LM_RATES:
        y, d = resample(x[:LM_LEN], r, 16000)
        lm = log_mel_spectrogram(torch.from_numpy(y)[None], n_mels=128)[0].numpy()
        yf = torchaudio.functional.resample(torch.from_numpy(x[:LM_LEN])[None], r, 16000)
        lmf = log_mel_spectrogram(yf, n_mels=128)[0].numpy()
        name = f"logmel_{r}.npy"
        np.save(os.path.join(a.out, name), lm.astype(np.float32))
        info["files"][name] = {"shape": list(lm.shape), "functional_resample_max_abs_diff": d,
                               "logmel_via_functional_resample_max_abs_diff":
                                   float(np.abs(lm - lmf).max())}
    with open(os.path.join(a.out, "info.json"), "w") as fh:
        json.dump(info, fh, indent=1)
    print(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()
