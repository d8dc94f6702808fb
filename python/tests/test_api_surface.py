"""The package's public surface: a docstring and full annotations on every public name, one mode
spelling accepted everywhere (parse_mode), FileNotFoundError for a missing model or voice file.
(mypy checks what the annotations say: `make typecheck-python`.)"""
import dataclasses
import errno
import inspect
import os
import pickle

import numpy as np
import pytest

import cosyvoice
import cosyvoice.convert


def public_objects():
    """(qualified name, object) of every public function, class, method and property."""
    out = []
    for mod in (cosyvoice, cosyvoice.convert):
        for name in mod.__all__:
            obj = getattr(mod, name)
            if inspect.isfunction(obj) or inspect.isclass(obj):
                out.append((f"{mod.__name__}.{name}", obj))
            if inspect.isclass(obj) and obj.__module__.startswith("cosyvoice"):
                for attr, member in vars(obj).items():
                    if attr.startswith("_") and (attr != "__init__" or dataclasses.is_dataclass(obj)):
                        continue      # a dataclass's __init__ is generated from its fields
                    if isinstance(member, (classmethod, staticmethod)):
                        member = member.__func__
                    if inspect.isfunction(member) or isinstance(member, property):
                        out.append((f"{mod.__name__}.{name}.{attr}", member))
    return out


def test_all_lists_only_what_exists():
    for mod in (cosyvoice, cosyvoice.convert):
        missing = [n for n in mod.__all__ if not hasattr(mod, n)]
        assert not missing, missing
    assert {"parse_mode", "mode_name", "MODES", "FileNotFound"} <= set(cosyvoice.__all__)


def test_every_public_name_has_a_docstring():
    undocumented = []
    for qual, obj in public_objects():
        if qual.endswith(".__init__") and obj is object.__init__:
            continue
        doc = (obj.fget.__doc__ if isinstance(obj, property) else obj.__doc__) or ""
        # a dataclass without its own docstring gets a generated "Name(field, ...)" one
        if not doc.strip() or doc.startswith(qual.rsplit(".", 1)[-1] + "("):
            undocumented.append(qual)
    assert not undocumented, f"no docstring: {undocumented}"
    assert len(public_objects()) > 60


def test_every_public_function_is_annotated():
    """Every parameter (but self/cls/*args/**kwargs of dunder methods) and every return."""
    missing = []
    for qual, obj in public_objects():
        fn = obj.fget if isinstance(obj, property) else obj
        if inspect.isclass(fn) or not inspect.isfunction(fn):
            continue
        sig = inspect.signature(fn)
        for p in sig.parameters.values():
            if p.name in ("self", "cls"):
                continue
            if p.annotation is inspect.Parameter.empty:
                missing.append(f"{qual}({p.name})")
        if sig.return_annotation is inspect.Signature.empty:
            missing.append(f"{qual} -> ?")
    assert not missing, f"not annotated: {missing}"


def test_parse_mode_spellings():
    for names, want in ((("zero_shot", "zero-shot", "Zero-Shot", " zero_shot "),
                         cosyvoice.MODE_ZERO_SHOT),
                        (("cross_lingual", "cross-lingual", "CROSS-LINGUAL"),
                         cosyvoice.MODE_CROSS_LINGUAL),
                        (("instruct", "INSTRUCT"), cosyvoice.MODE_INSTRUCT)):
        for n in names:
            assert cosyvoice.parse_mode(n) == want, n
        assert cosyvoice.parse_mode(want) == want
        assert cosyvoice.mode_name(names[0]) == names[1] if len(names) > 2 else True
    assert cosyvoice.mode_name(cosyvoice.MODE_CROSS_LINGUAL) == "cross-lingual"
    with pytest.raises(ValueError, match="zero-shot, cross-lingual, instruct"):
        cosyvoice.parse_mode("crosslingual")
    with pytest.raises(ValueError, match="mode 7"):
        cosyvoice.parse_mode(7)
    for bad in (1.0, True, None, b"instruct"):
        with pytest.raises(TypeError):
            cosyvoice.parse_mode(bad)


def test_make_params_takes_both_spellings():
    for a, b in (("cross-lingual", "cross_lingual"), ("zero-shot", "zero_shot")):
        pa, pb = cosyvoice.make_params(mode=a), cosyvoice.make_params(mode=b)
        assert pa.mode == pb.mode == cosyvoice.parse_mode(a)
    with pytest.raises(ValueError, match="mode 'foo'"):
        cosyvoice.make_params(mode="foo")


def test_both_spellings_say_the_same(engine, voice):
    a = engine.synthesize(voice, "Hello there.", mode="cross-lingual", seed=5, max_tokens=20)
    b = engine.synthesize(voice, "Hello there.", mode="cross_lingual", seed=5, max_tokens=20)
    assert a.size > 0 and np.array_equal(a, b)


def test_missing_model_is_file_not_found(tmp_path):
    path = str(tmp_path / "no-such-model.gguf")
    with pytest.raises(FileNotFoundError) as ei:
        cosyvoice.Engine(path)
    e = ei.value
    assert isinstance(e, cosyvoice.FileNotFound) and isinstance(e, cosyvoice.IOError_)
    assert isinstance(e, cosyvoice.CosyError) and isinstance(e, OSError)
    assert e.status == cosyvoice.ERR_IO and e.where == "cosy_engine_create"
    assert e.errno == errno.ENOENT and e.filename == path
    assert "no-such-model.gguf" in str(e) and "I/O error" in str(e), str(e)
    e2 = pickle.loads(pickle.dumps(e))
    assert type(e2) is type(e) and e2.filename == path and str(e2) == str(e)


def test_unreadable_model_is_not_file_not_found(tmp_path):
    p = tmp_path / "garbage.gguf"
    p.write_bytes(b"not a model file at all" * 10)
    with pytest.raises(cosyvoice.CosyError) as ei:
        cosyvoice.Engine(str(p))
    assert not isinstance(ei.value, FileNotFoundError), ei.value


def test_missing_voice_is_file_not_found(engine, tmp_path):
    path = os.fspath(tmp_path / "no-such-voice.gguf")
    with pytest.raises(FileNotFoundError) as ei:
        engine.load_voice(path)
    assert isinstance(ei.value, cosyvoice.IOError_) and ei.value.filename == path
    with pytest.raises(FileNotFoundError):
        engine.voice_from_wav(os.fspath(tmp_path / "no-such.wav"), "t")
