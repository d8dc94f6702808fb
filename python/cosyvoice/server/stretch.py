"""Speeds outside what the engine makes itself.

The engine changes speed as CosyVoice3 does: the mel spectrogram of the whole utterance is
resampled in time to T/speed frames before the vocoder, which keeps the pitch; it accepts 0.5 ..
2.0 (include/cosyvoice.h). OpenAI's API accepts 0.25 .. 4.0. The server splits a speed s into the
engine's part e = clamp(s, 0.5, 2.0) and the rest s / e (in 0.5 .. 2.0), which `time_stretch`
applies to the engine's audio: WSOLA (waveform-similarity overlap-add), a time-scale change that
keeps the pitch too, with 30 ms Hann frames at half overlap and a +-10 ms search for the most
similar continuation. So speed 4 is the engine at 2 then WSOLA at 2, speed 0.25 the engine at 0.5
then WSOLA at 0.5; inside 0.5 .. 2.0 the audio is the engine's alone.
"""
import math

import numpy as np

ENGINE_MIN_SPEED, ENGINE_MAX_SPEED = 0.5, 2.0
MIN_SPEED, MAX_SPEED = 0.25, 4.0


def split_speed(speed):
    """(engine speed, remaining factor for time_stretch) of a speed in MIN_SPEED .. MAX_SPEED."""
    e = min(max(float(speed), ENGINE_MIN_SPEED), ENGINE_MAX_SPEED)
    return e, float(speed) / e


def time_stretch(x, rate, sample_rate):
    """x (mono float) played rate times as fast with its pitch kept (WSOLA): about
    len(x) / rate samples. rate in (0.25, 4]; 1 returns a copy."""
    x = np.asarray(x, dtype=np.float32).reshape(-1)
    if not 0.25 <= rate <= 4.0:
        raise ValueError(f"time_stretch rate {rate} is outside 0.25 .. 4")
    if rate == 1.0 or x.size == 0:
        return x.copy()
    n = max(2 * int(0.015 * sample_rate), 16)          # frame: 30 ms, even
    hop = n // 2                                        # synthesis hop
    tol = max(int(0.010 * sample_rate), 1)              # search +-10 ms
    win = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)).astype(np.float32)  # periodic Hann
    n_out = max(int(round(x.size / rate)), 1)
    frames = math.ceil(n_out / hop) + 2
    off = int(math.ceil(hop * rate)) + n + tol           # x[0] in the padded input
    need = off + int(math.ceil(frames * hop * rate)) + n + tol + 1
    pad = np.zeros(max(need, off + x.size + n + tol + 1), dtype=np.float32)
    pad[off:off + x.size] = x
    out = np.zeros(frames * hop + n, dtype=np.float32)
    wsum = np.zeros_like(out)
    prev = None
    for k in range(frames):
        # output frame k starts at (k - 1) * hop (the first one half before the start, so that
        # every kept sample has two windows over it); its nominal input position is rate times
        nominal = off + int(round((k - 1) * hop * rate))
        if prev is None:
            pos = nominal
        else:
            target = pad[prev + hop:prev + hop + n]     # what would follow the previous frame
            lo = max(nominal - tol, 0)
            region = pad[lo:nominal + tol + n]
            c = np.correlate(region, target, mode="valid")
            pos = lo + int(np.argmax(c))
        out[k * hop:k * hop + n] += pad[pos:pos + n] * win
        wsum[k * hop:k * hop + n] += win
        prev = pos
    y = np.divide(out, wsum, out=np.zeros_like(out), where=wsum > 1e-3)
    return np.ascontiguousarray(y[hop:hop + n_out], dtype=np.float32)
