"""The ctypes layer against the library and the header: every exported symbol declared, struct
mirrors laid out as the C compiler lays out include/cosyvoice.h, library discovery, the status ->
exception mapping."""
import ctypes
import os
import shutil
import struct
import subprocess
import sys

import pytest

import cosyvoice
from cosyvoice import _capi
from cosy_test_support import REPO


def test_every_exported_symbol_is_declared():
    path = os.path.join(REPO, "abi", "cosyvoice.symbols")
    if not os.path.exists(path):
        pytest.skip("abi/cosyvoice.symbols not found (package tested outside its repository)")
    with open(path) as f:
        exported = {line.strip() for line in f if line.strip()}
    assert exported == set(_capi.PROTOS), (sorted(exported - set(_capi.PROTOS)),
                                           sorted(set(_capi.PROTOS) - exported))
    lib = _capi.lib()
    for name, (res, args) in _capi.PROTOS.items():
        fn = getattr(lib, name)
        assert list(fn.argtypes) == list(args), name
        assert fn.restype is res, name


def test_struct_layout_matches_the_header(tmp_path):
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("cc")
    src = os.path.join(REPO, "examples", "c", "abi_layout.c")
    if not cc or not os.path.exists(src):
        pytest.skip("no C compiler or examples/c/abi_layout.c")
    exe = tmp_path / "abi_layout"
    subprocess.run([cc, "-std=c11", "-I", os.path.join(REPO, "include"), src, "-o", str(exe)],
                   check=True)
    lines = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split("\n")
    n_fields = 0
    structs = set()
    for line in lines:
        w = line.split()
        if not w:
            continue
        st = _capi.STRUCTS[w[1]]
        if w[0] == "struct":
            structs.add(w[1])
            assert ctypes.sizeof(st) == int(w[2]), f"{w[1]}: ctypes {ctypes.sizeof(st)} != C {w[2]}"
        else:
            f = getattr(st, w[2])
            assert (f.offset, f.size) == (int(w[3]), int(w[4])), f"{w[1]}.{w[2]}"
            n_fields += 1
    assert structs == set(_capi.STRUCTS)
    assert n_fields == sum(len(s._fields_) for s in _capi.STRUCTS.values())


def test_init_fills_struct_size_and_defaults():
    p = cosyvoice.make_params(seed=3, mode="instruct", instruct_text="Speak slowly.")
    assert p.struct_size == ctypes.sizeof(_capi.SynthParams)
    assert (p.seed, p.mode, p.instruct_text) == (3, cosyvoice.MODE_INSTRUCT, b"Speak slowly.")
    assert cosyvoice.make_params(text_normalization=False).flags == \
        cosyvoice.SYNTH_NO_TEXT_NORMALIZATION
    with pytest.raises(ValueError, match="mode"):
        cosyvoice.make_params(mode="shouting")
    num, s = cosyvoice.version()
    major, minor, patch = (int(x) for x in s.split()[0].split("."))
    assert num == major * 10000 + minor * 100 + patch


def _python(code, **env):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e,
                          timeout=120)


def test_cosyvoice_lib_names_the_library():
    here = cosyvoice.find_library()
    # a path that does not exist is refused with its name, before dlopen
    r = _python("import cosyvoice\ntry:\n    cosyvoice.version()\nexcept cosyvoice.LibraryNotFound "
                "as e:\n    print('NOTFOUND', e)\n", COSYVOICE_LIB="/nonexistent/libcosyvoice.so.0")
    assert "NOTFOUND COSYVOICE_LIB=/nonexistent/libcosyvoice.so.0: no such file" in r.stdout, r
    # a file that is not a library: dlopen's message is passed on
    r = _python("import cosyvoice\ntry:\n    cosyvoice.version()\nexcept cosyvoice.LibraryNotFound "
                "as e:\n    print('NOTFOUND', e)\n", COSYVOICE_LIB=os.path.abspath(__file__))
    assert "NOTFOUND cannot load libcosyvoice" in r.stdout, r
    # import works without the library; only the first call needs it
    r = _python("import cosyvoice; print('imported')", COSYVOICE_LIB="/nonexistent/x.so")
    assert r.stdout.strip() == "imported", r
    assert here


def test_pkg_config_finds_the_library(tmp_path):
    """Without COSYVOICE_LIB and without a library inside the package (hidden here: an installed
    package finds its own copy first), a cosyvoice.pc on PKG_CONFIG_PATH points it at libdir."""
    if not shutil.which("pkg-config"):
        pytest.skip("no pkg-config")
    real = cosyvoice.find_library()
    if os.sep not in real:
        pytest.skip("the library was found by name, not by path")
    libdir = tmp_path / "lib"
    libdir.mkdir()
    os.symlink(os.path.realpath(real), libdir / "libcosyvoice.so.0")
    (tmp_path / "cosyvoice.pc").write_text(
        f"libdir={libdir}\nName: cosyvoice\nDescription: test\nVersion: 0.1.0\nLibs: -L${{libdir}}\n")
    env = {k: v for k, v in os.environ.items() if k != "COSYVOICE_LIB"}
    env["PKG_CONFIG_PATH"] = str(tmp_path)
    r = subprocess.run([sys.executable, "-c", "import cosyvoice, cosyvoice._capi as c; "
                        "c.PACKAGE_LIB_DIR = '/nonexistent'; print(cosyvoice.find_library()); "
                        "print(cosyvoice.version()[1])"], capture_output=True, text=True, env=env,
                       timeout=120)
    out = r.stdout.split("\n")
    assert out[0] == str(libdir / "libcosyvoice.so.0"), r
    assert out[1].startswith("0."), r


def test_each_status_has_its_exception():
    for status, cls in cosyvoice.BY_STATUS.items():
        e = cosyvoice.error_for(status, "detail", "cosy_x")
        assert type(e) is cls and e.status == status and e.message == "detail"
        assert str(e).startswith("cosy_x: ") and "detail" in str(e)
    assert isinstance(cosyvoice.error_for(cosyvoice.ERR_INVALID_ARG), ValueError)
    assert isinstance(cosyvoice.error_for(cosyvoice.ERR_TIMEOUT), TimeoutError)
    assert isinstance(cosyvoice.error_for(cosyvoice.ERR_IO), OSError)
    unknown = cosyvoice.error_for(12345, "x")
    assert type(unknown) is cosyvoice.CosyError and "unknown status" in str(unknown)
    assert len(cosyvoice.BY_STATUS) == 15


def test_errors_carry_last_error():
    with pytest.raises(cosyvoice.IOError_) as ei:
        cosyvoice.Engine("/nonexistent/model.gguf")
    assert ei.value.status == cosyvoice.ERR_IO and "/nonexistent/model.gguf" in ei.value.message
    assert ei.value.where == "cosy_engine_create"
    with pytest.raises(cosyvoice.IOError_):   # the flag passes the checks; the file does not
        cosyvoice.Engine("/nonexistent/model.gguf", batch_invariant=True)
    with pytest.raises(cosyvoice.InvalidArgument) as ei:
        cosyvoice.audio_to_mel(__import__("numpy").zeros(100, "f"), 1000)   # rate out of range
    assert ei.value.message
    assert cosyvoice.status_str(cosyvoice.ERR_CANCELLED) == "cancelled"


def test_wav_roundtrip(tmp_path):
    import numpy as np
    x = (0.5 * np.sin(np.arange(2400) / 7.0)).astype(np.float32)
    cosyvoice.write_wav(tmp_path / "a.wav", x, 16000)
    y, rate = cosyvoice.read_wav(tmp_path / "a.wav")
    assert rate == 16000 and y.dtype == np.float32 and y.shape == x.shape
    assert np.max(np.abs(y - x)) < 1.0 / 16000
    # IEEE float, stereo (mixed by the mean)
    st = np.stack([x, -0.5 * x], axis=1).astype("<f4")
    fmt = struct.pack("<HHIIHH", 3, 2, 22050, 22050 * 8, 8, 32)
    raw = st.tobytes()
    (tmp_path / "f.wav").write_bytes(b"RIFF" + struct.pack("<I", 36 + len(raw)) + b"WAVEfmt " +
                                     struct.pack("<I", 16) + fmt + b"data" +
                                     struct.pack("<I", len(raw)) + raw)
    y, rate = cosyvoice.read_wav(tmp_path / "f.wav")
    assert rate == 22050 and np.allclose(y, 0.25 * x, atol=1e-7)
    (tmp_path / "bad.wav").write_bytes(b"RIFF\0\0\0\0WAVEfmt " + struct.pack("<I", 16) +
                                       struct.pack("<HHIIHH", 2, 1, 8000, 0, 0, 4))
    with pytest.raises(ValueError, match="no data chunk"):
        cosyvoice.read_wav(tmp_path / "bad.wav")
    h = cosyvoice.wav_header(24000)
    assert len(h) == 44 and h[4:8] == b"\xff\xff\xff\xff" and h[40:44] == b"\xff\xff\xff\xff"
    assert cosyvoice.to_pcm16([2.0, -2.0, 0.0]) == b"\xff\x7f\x01\x80\x00\x00"
