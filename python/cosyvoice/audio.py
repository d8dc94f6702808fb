"""WAV and PCM helpers (standard library + numpy): what a caller of the engine needs to store or
send its float32 audio.
"""
from __future__ import annotations

import os
import struct
from typing import TYPE_CHECKING, Any, Optional, Tuple, Union

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

# RIFF and data chunk sizes of a WAV header whose length is not known when it is sent (a
# stream): the largest value, which players read as "until the end of the stream"
STREAM_SIZE = 0xFFFFFFFF


def to_pcm16(samples: Any) -> bytes:
    """float samples in [-1, 1] -> little-endian signed 16-bit PCM bytes (clipped, rounded)."""
    a = np.asarray(samples, dtype=np.float32)
    q = np.rint(np.clip(a, -1.0, 1.0) * 32767.0).astype("<i2")
    return bytes(q.tobytes())


def wav_header(sample_rate: int, n_samples: Optional[int] = None, channels: int = 1) -> bytes:
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


def write_wav(path: Union[str, "os.PathLike[str]"], samples: Any, sample_rate: int) -> None:
    """Write mono float samples as a 16-bit PCM WAV file."""
    pcm = to_pcm16(samples)
    with open(path, "wb") as f:
        f.write(wav_header(sample_rate, len(pcm) // 2))
        f.write(pcm)


def read_wav(path: Union[str, "os.PathLike[str]"]) -> Tuple[npt.NDArray[np.float32], int]:
    """A WAV file as (float32 mono samples, rate): integer PCM of 8/16/24/32 bits or IEEE float
    of 32/64 bits (format 1 or 3, also inside WAVE_FORMAT_EXTENSIBLE); the channels are mixed by
    their mean. Raises ValueError for anything else (the message says what)."""
    with open(path, "rb") as f:
        data = f.read()
    return decode_wav(data, str(path))


def decode_wav(data: bytes, path: str = "WAV data") -> Tuple[npt.NDArray[np.float32], int]:
    """The bytes of a WAV file as read_wav reads a file (path: the name its messages start
    with)."""
    if len(data) < 12 or data[:4] not in (b"RIFF", b"RF64") or data[8:12] != b"WAVE":
        raise ValueError(f"{path}: not a RIFF/WAVE file")
    pos, fmt, pcm = 12, None, None
    while pos + 8 <= len(data):
        cid, size = data[pos:pos + 4], struct.unpack("<I", data[pos + 4:pos + 8])[0]
        body = data[pos + 8:pos + 8 + size]
        if cid == b"fmt ":
            if len(body) < 16:
                raise ValueError(f"{path}: fmt chunk of {len(body)} bytes")
            tag, ch, rate, _, _, bits = struct.unpack("<HHIIHH", body[:16])
            if tag == 0xFFFE and len(body) >= 26:
                tag = struct.unpack("<H", body[24:26])[0]   # the sub-format GUID's first field
            fmt = (tag, ch, rate, bits)
        elif cid == b"data":
            pcm = body   # a stream header's size may run past the end: take what is there
            break
        pos += 8 + size + (size & 1)
    if fmt is None or pcm is None:
        raise ValueError(f"{path}: no {'fmt' if fmt is None else 'data'} chunk")
    tag, ch, rate, bits = fmt
    if ch < 1:
        raise ValueError(f"{path}: {ch} channels")
    width = bits // 8
    pcm = pcm[:len(pcm) - len(pcm) % (width * ch)] if width else pcm
    if tag == 1 and bits == 8:
        x = (np.frombuffer(pcm, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    elif tag == 1 and bits == 16:
        x = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
    elif tag == 1 and bits == 24:
        b = np.frombuffer(pcm, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        v = np.where(v >= 1 << 23, v - (1 << 24), v)
        x = v.astype(np.float32) / float(1 << 23)
    elif tag == 1 and bits == 32:
        x = (np.frombuffer(pcm, dtype="<i4").astype(np.float64) / float(1 << 31)).astype(np.float32)
    elif tag == 3 and bits in (32, 64):
        x = np.frombuffer(pcm, dtype="<f4" if bits == 32 else "<f8").astype(np.float32)
    else:
        raise ValueError(f"{path}: WAV format {tag} with {bits}-bit samples is not supported "
                         "(integer PCM 8/16/24/32 or float 32/64)")
    if ch > 1:
        x = x.reshape(-1, ch).mean(axis=1, dtype=np.float32)
    return np.ascontiguousarray(x, dtype=np.float32), rate
