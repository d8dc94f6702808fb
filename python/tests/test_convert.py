"""cosyvoice-convert, the package's console command, on a folder with the released layout
(tests/released_folder.py: the small golden checkpoint, the small front-end ONNX models, a
cosyvoice3.yaml and the real Qwen2 tokenizer), then the result loaded by the engine: a voice
cloned from audio and a few seconds said with it.

Needs the shared reference data (../shared or $COSY_SHARED) and the onnx package (the released
folder's front-end models are .onnx files); skips with the reason without them.
"""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import cosy_test_support as support

REPO = support.REPO
SHARED = os.environ.get("COSY_SHARED") or os.path.join(REPO, "..", "shared")
sys.path.insert(0, os.path.join(REPO, "tests"))
import released_folder  # noqa: E402


def convert_command():
    """The installed console script next to this interpreter, else `python -m cosyvoice.convert`
    (the same entry point) when the package is imported from a checkout."""
    exe = shutil.which("cosyvoice-convert", path=os.path.dirname(sys.executable))
    return [exe] if exe else [sys.executable, "-m", "cosyvoice.convert"]


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    missing = released_folder.available(SHARED)
    if missing:
        pytest.skip(f"{missing} not found (the shared reference data: set COSY_SHARED)")
    pytest.importorskip("onnx", reason="the released folder's front-end models are .onnx files")
    return released_folder.build(str(tmp_path_factory.mktemp("Fun-CosyVoice3-0.5B")), SHARED)


@pytest.fixture(scope="module")
def converted(released, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("converted") / "model.gguf")
    p = subprocess.run(convert_command() + [released, "-o", out, "--dtype", "f32"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert f"wrote {out}" in p.stdout
    return out


def test_console_script_installed():
    """pip install puts cosyvoice-convert next to the interpreter (make test-python installs it)."""
    if "site-packages" not in os.path.dirname(os.path.abspath(__import__("cosyvoice").__file__)):
        pytest.skip("the cosyvoice package is imported from a checkout, not installed")
    assert shutil.which("cosyvoice-convert", path=os.path.dirname(sys.executable)), \
        "cosyvoice-convert is not installed with the package ([project.scripts])"
    p = subprocess.run(["cosyvoice-convert", "--help"], capture_output=True, text=True,
                       env=dict(os.environ, PATH=os.path.dirname(sys.executable)))
    assert p.returncode == 0 and "RELEASED_FOLDER" in p.stdout and "--rl" in p.stdout, p.stdout


def test_released_folder_loads_clones_and_speaks(converted):
    """The converted released folder: engine created, a voice cloned from a WAV, speech made."""
    import cosyvoice
    rate = 16000
    t = np.arange(int(rate * 2.0)) / rate
    tone = (0.3 * np.sin(2 * np.pi * 150.0 * t) * (1 + 0.3 * np.sin(2 * np.pi * 2.1 * t)))
    wav = os.path.join(os.path.dirname(converted), "prompt.wav")
    cosyvoice.write_wav(wav, tone.astype(np.float32), rate)
    with cosyvoice.Engine(converted) as eng:
        with eng.voice_from_wav(wav, "A made up prompt.") as voice:
            pcm = eng.synthesize(voice, "Hello there.", seed=3, max_tokens=30)
    assert pcm.dtype == np.float32 and pcm.size > 0 and np.isfinite(pcm).all()
    assert np.abs(pcm).max() <= 1.0


def test_errors_name_the_problem(released, tmp_path):
    """A file given for the folder and --rl without llm.rl.pt: exit 1 and a one-line reason."""
    for args, words in (([os.path.join(released, "llm.pt")], "not a folder"),
                        ([released, "--rl"], "llm.rl.pt: not found")):
        p = subprocess.run(convert_command() + args + ["-o", str(tmp_path / "x.gguf")],
                           capture_output=True, text=True)
        assert p.returncode == 1, p.stderr
        assert "Traceback" not in p.stderr and words in p.stderr, p.stderr
