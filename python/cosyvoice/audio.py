"""WAV and PCM helpers (standard library + numpy): what a caller of the engine needs to store or
send its float32 audio.
"""
import os
import struct
import wave

import numpy as np

# RIFF and data chunk sizes of a WAV header whose length is not known when it is sent (a
# stream): the largest value, which players read as "until the end of the stream"
STREAM_SIZE = 0xFFFFFFFF


def to_pcm16(samples):
    """float samples in [-1, 1] -> little-endian signed 16-bit PCM bytes (clipped, rounded)."""
    a = np.asarray(samples, dtype=np.float32)
    q = np.rint(np.clip(a, -1.0, 1.0) * 32767.0).astype("<i2")
    return q.tobytes()


def wav_header(sample_rate, n_samples=None, channels=1):
    """The 44-byte header of a 16-bit PCM WAV. n_samples=None: a stream of unknown length (both
    sizes STREAM_SIZE)."""
    if n_samples is None:
        data, riff = STREAM_SIZE, STREAM_SIZE
    else:
        data = n_samples * 2 * channels
        if data + 36 > 0xFFFFFFFF:
            raise ValueError(f"{n_samples} samples do not fit in a WAV file (4 GiB)")
        riff = data + 36
    return (b"RIFF" + struct.pack("<I", riff) + b"WAVE" + b"fmt " +
            struct.pack("<IHHIIHH", 16, 1, channels, sample_rate, sample_rate * 2 * channels,
                        2 * channels, 16) +
            b"data" + struct.pack("<I", data))


def write_wav(path, samples, sample_rate):
    """Write mono float samples as a 16-bit PCM WAV file."""
    pcm = to_pcm16(samples)
    with open(path, "wb") as f:
        f.write(wav_header(sample_rate, len(pcm) // 2))
        f.write(pcm)


def read_wav(path):
    """A PCM WAV file (8/16/24/32-bit integer) as (float32 mono samples in [-1, 1], rate); the
    channels are mixed by their mean."""
    with wave.open(os.fspath(path), "rb") as w:
        ch, width, rate = w.getnchannels(), w.getsampwidth(), w.getframerate()
        raw = w.readframes(w.getnframes())
    if width == 1:
        x = (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width == 2:
        x = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    elif width == 3:
        b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        v = np.where(v >= 1 << 23, v - (1 << 24), v)
        x = v.astype(np.float32) / float(1 << 23)
    elif width == 4:
        x = (np.frombuffer(raw, dtype="<i4").astype(np.float64) / float(1 << 31)).astype(np.float32)
    else:
        raise ValueError(f"{path}: {8 * width}-bit samples are not supported")
    if ch > 1:
        x = x.reshape(-1, ch).mean(axis=1, dtype=np.float32)
    return np.ascontiguousarray(x, dtype=np.float32), rate
