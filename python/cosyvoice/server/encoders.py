"""Audio encoders for the speech endpoints: float32 chunks in, bytes out.

wav, pcm, mulaw and alaw (G.711, 8-bit companded, for phone lines: use sample_rate 8000) need
nothing but numpy. flac, opus and mp3 use the `soundfile` package (libsndfile, bundled in its
wheels; the package's `server` extra installs it); without it they are refused with a 400 that
says so. aac has no encoder here and is always refused.

Streaming: wav (header with unknown sizes, see cosyvoice.audio.wav_header), pcm, mulaw, alaw and
opus (Ogg pages are flushed as they fill) give bytes for every chunk. flac and mp3 are sent when
the utterance is complete: libsndfile goes back to the start of the file at the end to write the
length into the header (FLAC STREAMINFO, the MP3 info frame), and a stream cut at an earlier
point does not decode with libsndfile itself.
"""
import numpy as np

from ..audio import to_pcm16, wav_header

try:   # optional
    import soundfile
except Exception:   # ImportError, or OSError when libsndfile cannot be loaded
    soundfile = None

CONTENT_TYPES = {"wav": "audio/wav", "pcm": "audio/pcm", "flac": "audio/flac",
                 "opus": "audio/ogg; codecs=opus", "mp3": "audio/mpeg", "aac": "audio/aac",
                 "mulaw": "audio/x-mulaw", "alaw": "audio/x-alaw"}
ALL_FORMATS = tuple(CONTENT_TYPES)
_SF = {"flac": ("FLAC", "PCM_16"), "opus": ("OGG", "OPUS"), "mp3": ("MP3", "MPEG_LAYER_III")}
# sample rates each libsndfile codec accepts (Opus: the five of RFC 6716; MP3: MPEG-1/2/2.5)
_SF_RATES = {"opus": (8000, 12000, 16000, 24000, 48000),
             "mp3": (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000)}


def unsupported_reason(fmt, sample_rate):
    """None when fmt can be made at sample_rate here, else why not (for a 400)."""
    if fmt in ("wav", "pcm", "mulaw", "alaw"):
        return None
    if fmt == "aac":
        return "response_format 'aac' is not supported by this server (no AAC encoder); use " \
               "wav, pcm" + (", flac, opus or mp3" if soundfile else "")
    if fmt not in _SF:
        return f"unknown response_format {fmt!r}"
    if soundfile is None:
        return f"response_format {fmt!r} needs the Python package 'soundfile' on the server, " \
               "which is not installed; use wav or pcm"
    major, sub = _SF[fmt]
    if major not in soundfile.available_formats() or sub not in soundfile.available_subtypes(major):
        return f"response_format {fmt!r}: this server's libsndfile has no {major}/{sub} encoder"
    if fmt in _SF_RATES and sample_rate not in _SF_RATES[fmt]:
        return f"response_format {fmt!r} cannot be made at {sample_rate} Hz (accepted: " \
               f"{', '.join(map(str, _SF_RATES[fmt]))})"
    return None


def streams(fmt):
    """True when fmt sends bytes chunk by chunk (first audio before the utterance ends)."""
    return fmt in ("wav", "pcm", "opus", "mulaw", "alaw")


def _mulaw(x):
    """G.711 mu-law bytes of float samples in [-1, 1] (the continuous companding curve of the
    standard, mu = 255, on 14-bit magnitudes; decoders expand it with the same curve)."""
    # 8158: the largest magnitude whose biased value (+33) stays within segment 7
    q = np.clip(np.rint(np.asarray(x, np.float64) * 8159.0), -8158, 8158).astype(np.int32)
    sign = (q < 0).astype(np.int32)
    mag = np.abs(q) + 33
    exp = np.clip(np.floor(np.log2(mag)).astype(np.int32) - 5, 0, 7)
    mant = (mag >> (exp + 1)) & 0x0F
    return (~((sign << 7) | (exp << 4) | mant) & 0xFF).astype(np.uint8).tobytes()


def _alaw(x):
    """G.711 A-law bytes of float samples in [-1, 1] (13-bit magnitudes, even bits inverted)."""
    q = np.clip(np.rint(np.asarray(x, np.float64) * 4095.0), -4095, 4095).astype(np.int32)
    sign = (q >= 0).astype(np.int32)
    mag = np.abs(q)
    seg = np.floor(np.log2(np.maximum(mag, 1))).astype(np.int32) - 4
    exp = np.where(mag < 32, 0, np.clip(seg, 0, 7))
    mant = np.where(exp == 0, mag >> 1, mag >> exp) & 0x0F
    return (((sign << 7) | (exp << 4) | mant) ^ 0x55).astype(np.uint8).tobytes()


def encode_raw(fmt, chunk):
    """A chunk as headerless samples: pcm (16-bit little endian), mulaw or alaw (G.711)."""
    if fmt == "pcm":
        return to_pcm16(chunk)
    if fmt == "mulaw":
        return _mulaw(chunk)
    if fmt == "alaw":
        return _alaw(chunk)
    raise ValueError(f"{fmt!r} is not a raw format")


class _Sink:
    """A file object for libsndfile's virtual I/O that remembers everything written, so that
    take() can hand out the bytes appended since the last call."""

    def __init__(self):
        self.buf = bytearray()
        self.pos = 0
        self.taken = 0

    def write(self, b):
        b = bytes(b)
        end = self.pos + len(b)
        if end > len(self.buf):
            self.buf.extend(b"\0" * (end - len(self.buf)))
        self.buf[self.pos:end] = b
        self.pos = end
        return len(b)

    def seek(self, offset, whence=0):
        base = {0: 0, 1: self.pos, 2: len(self.buf)}[whence]
        self.pos = base + offset
        return self.pos

    def tell(self):
        return self.pos

    def read(self, n=-1):
        end = len(self.buf) if n < 0 else min(len(self.buf), self.pos + n)
        out = bytes(self.buf[self.pos:end])
        self.pos = end
        return out

    def take(self):
        out = bytes(self.buf[self.taken:])
        self.taken = len(self.buf)
        return out


class Encoder:
    """encode(chunk) -> bytes to send now; finish() -> the remaining bytes."""

    def __init__(self, fmt, sample_rate):
        why = unsupported_reason(fmt, sample_rate)
        if why:
            raise ValueError(why)
        self.fmt, self.rate = fmt, sample_rate
        self.started = False
        self.sink = None
        self.sf = None
        if fmt in _SF:
            major, sub = _SF[fmt]
            self.sink = _Sink()
            self.sf = soundfile.SoundFile(self.sink, mode="w", samplerate=sample_rate, channels=1,
                                          format=major, subtype=sub)

    def encode(self, chunk):
        if self.fmt in ("pcm", "mulaw", "alaw"):
            return encode_raw(self.fmt, chunk)
        if self.fmt == "wav":
            head = b"" if self.started else wav_header(self.rate)
            self.started = True
            return head + to_pcm16(chunk)
        if self.fmt == "flac":   # the same 16-bit samples as wav and pcm (lossless)
            self.sf.write(np.frombuffer(to_pcm16(chunk), dtype="<i2"))
        else:
            self.sf.write(np.asarray(chunk, dtype=np.float32))
        return self.sink.take() if streams(self.fmt) else b""

    def finish(self):
        if self.fmt == "wav" and not self.started:
            self.started = True
            return wav_header(self.rate)
        if self.sf is not None:
            self.sf.close()
            self.sf = None
            return self.sink.take()
        return b""

    def close(self):
        """Drop an unfinished encoder (the stream was abandoned)."""
        if self.sf is not None:
            try:
                self.sf.close()
            except Exception:
                pass
            self.sf = None


def encode_whole(fmt, sample_rate, pcm):
    """The whole utterance as one file: a wav header with the exact sizes, pcm, or the codec's
    file."""
    if fmt == "wav":
        return wav_header(sample_rate, int(pcm.size)) + to_pcm16(pcm)
    if fmt in ("pcm", "mulaw", "alaw"):
        return encode_raw(fmt, pcm)
    enc = Encoder(fmt, sample_rate)
    try:
        return enc.encode(pcm) + enc.finish()
    finally:
        enc.close()
