#!/usr/bin/env python3
"""say.py - text to a 16-bit WAV with the `cosyvoice` package (python/ of this repository).

    python3 say.py MODEL.gguf VOICE.gguf OUT.wav "Text to say." [--seed N] [--rate HZ] [--stream]
                   [--text-stream [--delay-ms MS]]

--stream pulls the audio chunk by chunk (numpy float32 arrays) and appends each chunk to the file
as it arrives. --text-stream also streams the text in: the words are pushed one at a time,
--delay-ms apart (as a chat model would produce them), while the audio is read
(Engine.stream_text).
"""
import argparse
import sys
import time
import wave

import cosyvoice


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("voice")
    ap.add_argument("out")
    ap.add_argument("text")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rate", type=int, default=0, help="output rate (default: native 24000)")
    ap.add_argument("--stream", action="store_true")
    ap.add_argument("--text-stream", action="store_true", help="push the words one at a time")
    ap.add_argument("--delay-ms", type=int, default=50, help="between two words (--text-stream)")
    a = ap.parse_args()

    print("libcosyvoice", cosyvoice.version()[1], "from", cosyvoice.find_library())
    with cosyvoice.Engine(a.model) as eng, eng.load_voice(a.voice) as voice:
        rate = a.rate or eng.sample_rate
        t0 = time.monotonic()
        ttfb = None
        n = 0
        with wave.open(a.out, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(rate)
            if a.text_stream:
                def words():
                    for i, w in enumerate(a.text.split(" ")):
                        time.sleep(a.delay_ms / 1000)
                        yield w if i == 0 else " " + w

                for chunk in eng.stream_text(voice, words(), seed=a.seed, sample_rate=a.rate):
                    if ttfb is None:
                        ttfb = time.monotonic() - t0
                    w.writeframes(cosyvoice.to_pcm16(chunk))
                    n += chunk.size
            elif a.stream:
                for chunk in eng.stream(voice, a.text, seed=a.seed, sample_rate=a.rate):
                    if ttfb is None:
                        ttfb = time.monotonic() - t0
                    w.writeframes(cosyvoice.to_pcm16(chunk))
                    n += chunk.size
            else:
                pcm = eng.synthesize(voice, a.text, seed=a.seed, sample_rate=a.rate)
                w.writeframes(cosyvoice.to_pcm16(pcm))
                n = pcm.size
        wall = time.monotonic() - t0
    audio = n / rate
    if n == 0:
        sys.exit("say.py: the engine made no audio")
    print(f"{n} samples at {rate} Hz ({audio:.2f} s), wall {wall:.3f} s, RTF {wall / audio:.3f}"
          + (f", TTFB {ttfb:.3f} s" if ttfb is not None else ""))
    print("wrote", a.out)


if __name__ == "__main__":
    try:
        main()
    except cosyvoice.CosyError as e:
        sys.exit(f"say.py: {e}")
