#!/usr/bin/env python3
"""clone.py - a voice from a recording with the cosyvoice package: clone, save, reuse.

    python3 clone.py MODEL.gguf PROMPT.wav "What the prompt says." VOICE_OUT.gguf OUT.wav "Text."

The WAV may be 16-bit PCM or 32-bit float at any rate from 16 to 192 kHz, 0.5 to 30 s (the model
file needs the front-end models). The voice is cloned once (Engine.voice_from_wav, i.e.
cosy_voice_from_audio) and saved; what a later run does is then shown: load the saved file and
say something with it (exits non-zero when the loaded voice does not say exactly what the cloned
one says with the same seed).
"""
import argparse
import time
import wave

import numpy as np

import cosyvoice


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("prompt_wav")
    ap.add_argument("transcript")
    ap.add_argument("voice_out")
    ap.add_argument("out")
    ap.add_argument("text")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    with cosyvoice.Engine(a.model) as eng:
        t0 = time.monotonic()
        with eng.voice_from_wav(a.prompt_wav, a.transcript) as cloned:
            print(f"cloned a voice from {a.prompt_wav} in {time.monotonic() - t0:.3f} s")
            cloned.save(a.voice_out)
            first = eng.synthesize(cloned, a.text, seed=a.seed, max_tokens=80)
        # a later run: no cloning, the saved voice
        with eng.load_voice(a.voice_out) as voice:
            pcm = eng.synthesize(voice, a.text, seed=a.seed, max_tokens=80)
        if len(pcm) == 0 or not np.array_equal(pcm, first):
            raise SystemExit("clone.py: the saved voice does not say what the cloned one said")
        with wave.open(a.out, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(eng.sample_rate)
            w.writeframes(cosyvoice.to_pcm16(pcm))
    print(f"saved the voice to {a.voice_out}; {len(pcm)} samples with it in {a.out} "
          "(identical to the cloned voice's)")


if __name__ == "__main__":
    main()
