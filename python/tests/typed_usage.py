"""Code a user writes against the package, checked by mypy with the strict flags of the public
API (python/pyproject.toml [tool.mypy]; `make typecheck-python`), never run: the annotations must
let typical use type-check without casts or ignores. (Not a pytest module: no test_ prefix.)"""
from __future__ import annotations

from typing import List

import numpy as np
import numpy.typing as npt

import cosyvoice
from cosyvoice.convert import ConvertError, convert


def say(model: str, voice_file: str, text: str) -> npt.NDArray[np.float32]:
    with cosyvoice.Engine(model, device=cosyvoice.DEVICE_CPU) as eng:
        with eng.load_voice(voice_file) as voice:
            pcm = eng.synthesize(voice, text, seed=1, mode=cosyvoice.parse_mode("cross-lingual"))
            chunks: List[npt.NDArray[np.float32]] = list(eng.stream(voice, text, mode="zero_shot"))
            rate: int = eng.sample_rate
            cosyvoice.write_wav("out.wav", pcm, rate)
            stats: cosyvoice.EngineStats = eng.stats()
            assert stats.requests_done >= 0 and len(chunks) >= 0
            return pcm


def clone(model: str, wav: str, transcript: str) -> None:
    try:
        with cosyvoice.Engine(model) as eng, eng.voice_from_wav(wav, transcript) as v:
            v.save("voice.gguf")
    except FileNotFoundError as exc:
        print(exc.filename)
    except cosyvoice.CosyError as exc:
        print(exc.status, exc.message)


def stream_request(eng: cosyvoice.Engine, voice: cosyvoice.Voice) -> int:
    with eng.submit(voice, "Hello.", params=cosyvoice.make_params(mode="instruct",
                                                                   instruct_text="Slowly.")) as r:
        n = sum(int(c.size) for c in r)
        st: cosyvoice.RequestStats = r.stats()
        return n + st.n_chunks


def heard(eng: cosyvoice.Engine, voice: cosyvoice.Voice, played: int) -> int:
    """Bytes of the pushed text whose speech can have started in the first `played` samples."""
    with eng.submit_text_stream(voice, seed=1) as r:
        r.push_text("Hello there. ")
        r.end_text()
        marks: list[cosyvoice.TextMark] = r.text_marks()
        return max((m.text_end for m in marks if 0 <= m.sample < played), default=0)


def to_file(folder: str) -> int:
    try:
        return convert(folder, "model.gguf", rl=True)
    except ConvertError as exc:
        print(exc)
        return 0
