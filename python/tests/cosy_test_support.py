"""Shared by the package's, the server's and the Triton model's tests: where the small test model
is, and a deterministic test voice made through the package (voice_from_features + save).

The test model is the small golden checkpoint converted by the Makefile ($COSY_TEST_MODEL, else
build/test/small-f32.gguf of this checkout); the front-end variant (voice cloning from audio) is
$COSY_TEST_FE_MODEL, else build/test/small-fe-f32.gguf.
"""
import os

import numpy as np

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TEXT = ("The quick brown fox jumps over the lazy dog, and the morning train was late again, so "
        "she walked along the river instead.")
PROMPT_TEXT = "A made up prompt.<|endofprompt|>"


def test_model():
    """Path of the small test model, or None when it has not been built."""
    p = os.environ.get("COSY_TEST_MODEL") or os.path.join(REPO, "build", "test", "small-f32.gguf")
    return p if os.path.exists(p) else None


def fe_test_model():
    p = os.environ.get("COSY_TEST_FE_MODEL") or os.path.join(REPO, "build", "test",
                                                             "small-fe-f32.gguf")
    return p if os.path.exists(p) else None


def voice_features(seed=5, seconds=2.0):
    """(speech_tokens, mel, speaker_embedding) of a made-up voice: the mel of a modulated tone,
    random prompt tokens and speaker embedding (deterministic for a seed)."""
    import cosyvoice
    rate = 24000
    t = np.arange(int(rate * seconds)) / rate
    f0 = 140.0 + 10.0 * (seed % 6)
    tone = 0.3 * np.sin(2 * np.pi * f0 * t) * (1 + 0.2 * np.sin(2 * np.pi * 1.3 * t))
    mel = cosyvoice.audio_to_mel(tone.astype(np.float32), rate)
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, 6561, mel.shape[0] // 2)
    spk = rng.standard_normal(192).astype(np.float32)
    return tokens, mel, spk


def make_voice(engine, seed=5):
    tokens, mel, spk = voice_features(seed)
    return engine.voice_from_features(tokens, mel, spk, PROMPT_TEXT)


def write_voices(model_path, directory, names=("alloy",)):
    """Write NAME.gguf voice files (seeds 5, 6, ...) into directory with a throwaway engine."""
    import cosyvoice
    os.makedirs(directory, exist_ok=True)
    with cosyvoice.Engine(model_path) as eng:
        for i, name in enumerate(names):
            with make_voice(eng, 5 + i) as v:
                v.save(os.path.join(directory, name + ".gguf"))
    return directory
