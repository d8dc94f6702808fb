"""A model folder with exactly the released Fun-CosyVoice3-0.5B layout, made of test models.

    build(dst, shared) -> dst holding
      llm.pt flow.pt hift.pt      the small golden checkpoint (SHARED/golden/small)
      campplus.onnx               tests/data/frontend/campplus_small.onnx
      speech_tokenizer_v3.onnx    tests/data/frontend/s3tok_small.onnx
      cosyvoice3.yaml             tests/data/released/cosyvoice3.yaml (the small geometry)
      CosyVoice-BlankEN/          vocab.json, merges.txt, tokenizer_config.json (SHARED/tokenizer:
                                  the real Qwen2 tokenizer; its added_tokens.json stays out, as the
                                  released folder has no such file)
Files are symbolic links where the platform allows, copies otherwise. Used by tests/test_tools.py
(the converter's errors on such folders) and python/tests/test_convert.py (cosyvoice-convert on
it, then an engine and a voice cloned from audio with the result).
"""
import os
import shutil

TESTS = os.path.dirname(os.path.abspath(__file__))


def sources(shared):
    """released name -> source path."""
    small = os.path.join(shared, "golden", "small")
    fe = os.path.join(TESTS, "data", "frontend")
    tok = os.path.join(shared, "tokenizer")
    out = {fn: os.path.join(small, fn) for fn in ("llm.pt", "flow.pt", "hift.pt")}
    out["campplus.onnx"] = os.path.join(fe, "campplus_small.onnx")
    out["speech_tokenizer_v3.onnx"] = os.path.join(fe, "s3tok_small.onnx")
    out["cosyvoice3.yaml"] = os.path.join(TESTS, "data", "released", "cosyvoice3.yaml")
    for fn in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        out["CosyVoice-BlankEN/" + fn] = os.path.join(tok, fn)
    return out


def available(shared):
    """None when every source exists, else the first missing one."""
    return next((p for p in sources(shared).values() if not os.path.exists(p)), None)


def build(dst, shared):
    """Make the folder dst (created); -> dst."""
    for name, src in sources(shared).items():
        p = os.path.join(dst, name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        try:
            os.symlink(os.path.abspath(src), p)
        except OSError:
            shutil.copyfile(src, p)
    return dst
