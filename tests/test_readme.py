#!/usr/bin/env python3
"""tests/test_readme.py - the README's commands checked against what works (doc test; `make
test-readme`, part of `make test`).

Every command of the README's ```sh blocks is either run or checked, and a command this file does
not know fails the test (so a new command in the README comes with its check here):

  bash tools/setup.sh [--venv]   each option is one tools/setup.sh accepts
  make ... TARGET                each target exists (make's database), each VAR= is one the
                                 Makefile reads; the demo command is RUN as written (in the build
                                 folder B, which `make test-readme` has brought up to date, so it
                                 costs one synthesis with the demo model) and must write demo.wav
  the tests block                its commands are exactly the stages of .ci/run (CI adds only
                                 CUDA_ARCHS=all), so the README's test command is what CI runs
  huggingface-cli download ID    ID is the model docs/real-weights.md names (nothing is downloaded)
  cosyvoice-convert F -o M       options accepted by its --help; RUN on a folder with the released
                                 layout made of the test models (tests/released_folder.py), when
                                 the reference data (COSY_SHARED) and onnx are there, else SKIP
  build/bin/cosyvoice-say ...    options accepted by its --help; RUN with the converted model (or
                                 the demo model) and demo.wav as the recording; must write a WAV
  pip install './python[X]'      python/pyproject.toml has the extra X
  cosyvoice-server ...           a console script of python/pyproject.toml; options accepted by
                                 `python -m cosyvoice.server --help` in COSY_README_PYTHON (the
                                 test venv: it needs the [server] extra; SKIP without one)
  ```python blocks               compile; the one after the server command is RUN against that
                                 command (model, recording and port replaced by test ones, on the
                                 CPU) when COSY_README_PYTHON has the openai client, else SKIP

and every relative link of the README points at a file of the repository (and a heading, for
links with #anchor). Environment: B (the build folder, default build), PYTHON, COSY_SHARED,
COSY_README_PYTHON; exit status 0 when everything passes.
"""
import os
import re
import shlex
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
B = os.environ.get("B", "build")
BUILD = B if os.path.isabs(B) else os.path.join(ROOT, B)
FAILS = []
KNOWN_MODEL_ID = "FunAudioLLM/Fun-CosyVoice3-0.5B-2512"


def fail(msg):
    FAILS.append(msg)
    print("FAIL: " + msg)


def ok(msg):
    print("ok: " + msg)


def blocks(text):
    """(language, body) of every fenced block."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M)


def commands(body):
    """The commands of a shell block: continuation lines joined, comments dropped, split at &&."""
    out = []
    for line in body.replace("\\\n", " ").split("\n"):
        words = shlex.split(line, comments=True)
        cmd = []
        for w in words + ["&&"]:
            if w == "&&":
                if cmd:
                    out.append((cmd, line.split(" #")[0].strip()))
                cmd = []
            else:
                cmd.append(w)
    return out


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def check_links(text):
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        full = os.path.join(ROOT, path) if path else os.path.join(ROOT, "README.md")
        if not os.path.exists(full):
            fail(f"README links to {target}: no such file")
            continue
        if anchor:
            with open(full, encoding="utf-8") as f:
                heads = [slug(h) for h in re.findall(r"^#+ (.*)$", f.read(), flags=re.M)]
            if anchor not in heads:
                fail(f"README links to {target}: no heading with that anchor")
                continue
        ok(f"link {target}")


def make_targets():
    """Every target of the Makefile (make's database, nothing built: a scratch build folder)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, LC_ALL="C")
        env.pop("MAKEFLAGS", None)
        env.pop("MFLAGS", None)
        r = subprocess.run(["make", "-C", ROOT, "-npq", "B=" + tmp, "CUDA=0", ".DEFAULT"],
                           capture_output=True, text=True, env=env)
    return set(re.findall(r"^([A-Za-z0-9][\w.-]*):(?!=)", r.stdout, flags=re.M))


def help_options(argv, env=None):
    r = subprocess.run(argv + ["--help"], capture_output=True, text=True, env=env, cwd=ROOT)
    if r.returncode != 0:
        return None, (r.stdout + r.stderr).strip()[-400:]
    return set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", r.stdout)), ""


def check_options(name, words, opts):
    for w in words:
        if w.startswith("-") and w != "-":
            o = w.split("=", 1)[0]
            if o not in opts:
                fail(f"README: {name} {o}: not an option of {name} --help")
                return False
    ok(f"{name}: options {' '.join(w for w in words if w.startswith('-')) or '(none)'} accepted")
    return True


def wav_frames(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return -1
    i = 12
    while i + 8 <= len(data):
        cid, size = data[i:i + 4], struct.unpack("<I", data[i + 4:i + 8])[0]
        if cid == b"data":
            return min(size, len(data) - i - 8) // 2
        i += 8 + size + (size & 1)
    return -1


def pyproject():
    with open(os.path.join(ROOT, "python", "pyproject.toml"), encoding="utf-8") as f:
        return f.read()


def toml_section(text, name):
    m = re.search(r"^\[" + re.escape(name) + r"\]\n(.*?)(?=^\[|\Z)", text, flags=re.S | re.M)
    return m.group(1) if m else ""


def ci_stages():
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        return [shlex.split(l)[2:] for l in f if l.startswith("stage ")]


def free_port():
    import socket
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def run_client(state, body, env, work):
    """The README's server command (its options as written; the model, the recording and the port
    replaced by test ones) in COSY_README_PYTHON, then the README's python block against it, when
    that Python has the official openai client; the block must write a non-empty file."""
    import time
    import urllib.request
    spy, args = state["server"]
    if subprocess.run([spy, "-c", "import openai"], capture_output=True).returncode != 0:
        print("SKIP: running the python block (COSY_README_PYTHON has no openai package)")
        return
    port = free_port()
    model = state["model"] or os.path.join(BUILD, "demo", "demo.gguf")
    subst = {"--model": model, "--voice-wav": state["demo_wav"], "--port": str(port)}
    argv, prev = [], None
    for a in args:
        argv.append(subst.get(prev, a))
        prev = a
    if "--port" not in args:
        argv += ["--port", str(port)]
    if "--device" in argv:   # the README's GPU choice; the test runs on the CPU
        i = argv.index("--device")
        argv[i + 1] = "-1"
    senv = dict(env, COSYVOICE_LIB=os.path.join(BUILD, "lib", "libcosyvoice.so.0"))
    log = open(os.path.join(work, "server.log"), "w+")
    proc = subprocess.Popen([spy, "-m", "cosyvoice.server"] + argv, cwd=work, env=senv,
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(240):
            if proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        else:
            proc.poll()
        if proc.returncode is not None:
            log.seek(0)
            fail(f"README server command exited ({proc.returncode}): {log.read()[-1500:]}")
            return
        code = body.replace("127.0.0.1:8000", f"127.0.0.1:{port}")
        r = subprocess.run([spy, "-c", code], cwd=work, env=senv, capture_output=True, text=True,
                           timeout=300)
        outs = re.findall(r"write_to_file\(\"([^\"]+)\"\)", body)
        sizes = [os.path.getsize(os.path.join(work, o)) if os.path.exists(os.path.join(work, o)) else 0
                 for o in outs]
        if r.returncode != 0 or not outs or min(sizes) <= 0:
            fail(f"README python block against the README's server command failed: "
                 f"{(r.stdout + r.stderr)[-1500:]}")
        else:
            ok(f"ran the README's server command and python block: {outs} ({sizes} bytes)")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def main():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    check_links(readme)
    targets = make_targets()
    if "demo" not in targets or "test" not in targets:
        fail(f"could not read the Makefile's targets ({len(targets)} found)")
    with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as f:
        makefile = f.read()
    with open(os.path.join(ROOT, "tools", "setup.sh"), encoding="utf-8") as f:
        setup = f.read()
    stages = ci_stages()
    work = tempfile.mkdtemp(prefix="cosy-readme.")
    env = dict(os.environ)
    for k in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"):
        env.pop(k, None)
    env["B"] = B
    env["PYTHONPATH"] = os.path.join(ROOT, "python")
    python = os.environ.get("PYTHON", "python3")
    state = {"model": None, "demo_wav": os.path.join(ROOT, "demo.wav")}
    seen = set()
    for lang, body in blocks(readme):
        if lang == "python":
            try:
                compile(body, "README python block", "exec")
                ok("python block compiles")
            except SyntaxError as e:
                fail(f"README python block: {e}")
                continue
            if "server" in state:
                run_client(state, body, env, work)
            else:
                print("SKIP: running the python block against cosyvoice-server (no server command "
                      "checked before it)")
            continue
        if lang != "sh":
            continue
        cmds = commands(body)
        if any(c[0] == "make" and "test" in c for c, _ in cmds):
            # the tests block: exactly CI's stages (CI adds CUDA_ARCHS=all)
            for c, _ in cmds:
                if not any([w for w in s if w != "CUDA_ARCHS=all"] == c for s in stages):
                    fail(f"README test command {' '.join(c)!r} is not a stage of .ci/run "
                         f"(stages: {[' '.join(s) for s in stages]})")
                else:
                    ok(f"test command {' '.join(c)!r} is a stage of .ci/run")
        for c, line in cmds:
            prog = c[0]
            if prog == "bash" and c[1:2] == ["tools/setup.sh"]:
                for a in c[2:]:
                    if not re.search(r"^\s*" + re.escape(a) + r"\)", setup, flags=re.M):
                        fail(f"README: tools/setup.sh {a}: not an option of tools/setup.sh")
                ok(f"tools/setup.sh {' '.join(c[2:])}")
                seen.add("setup")
            elif prog == "make":
                for a in c[1:]:
                    if a.startswith("-"):
                        continue
                    if "=" in a:
                        var = a.split("=", 1)[0]
                        if not re.search(r"\b" + re.escape(var) + r"\b", makefile):
                            fail(f"README: make {a}: the Makefile does not read {var}")
                    elif a not in targets:
                        fail(f"README: make {a}: no such target")
                    else:
                        ok(f"make target {a}")
                if "demo" in c[1:]:
                    seen.add("demo")
                    t0 = os.path.getmtime(state["demo_wav"]) if os.path.exists(state["demo_wav"]) else 0
                    r = subprocess.run(["bash", "-c", line.split("&&")[-1].strip()], cwd=ROOT, env=env,
                                       capture_output=True, text=True)
                    if r.returncode != 0:
                        fail(f"README demo command {line!r} failed: {(r.stdout + r.stderr)[-1500:]}")
                    elif not os.path.exists(state["demo_wav"]) or os.path.getmtime(state["demo_wav"]) < t0 \
                            or wav_frames(state["demo_wav"]) <= 0:
                        fail(f"README demo command {line!r} wrote no demo.wav with audio")
                    else:
                        ok(f"ran {line.split('&&')[-1].strip()!r}: demo.wav, "
                           f"{wav_frames(state['demo_wav'])} samples")
            elif prog in ("huggingface-cli", "hf"):
                ids = [w for w in c if "/" in w and not w.startswith("-")]
                with open(os.path.join(ROOT, "docs", "real-weights.md"), encoding="utf-8") as f:
                    rw = f.read()
                if ids != [KNOWN_MODEL_ID] or KNOWN_MODEL_ID not in rw:
                    fail(f"README: {line!r}: the model id is not {KNOWN_MODEL_ID} of docs/real-weights.md")
                else:
                    ok(f"download of {KNOWN_MODEL_ID} (not run)")
                seen.add("download")
            elif prog == "cosyvoice-convert":
                seen.add("convert")
                if 'cosyvoice-convert = "cosyvoice.convert:main"' not in toml_section(pyproject(), "project.scripts"):
                    fail("README: cosyvoice-convert is not a console script of python/pyproject.toml")
                opts, err = help_options([python, "-m", "cosyvoice.convert"], env)
                if opts is None:
                    fail(f"cosyvoice-convert --help failed: {err}")
                    continue
                if not check_options("cosyvoice-convert", c[1:], opts):
                    continue
                shared = os.environ.get("COSY_SHARED", os.path.join(ROOT, "..", "shared"))
                have_onnx = subprocess.run([python, "-c", "import onnx"], capture_output=True).returncode == 0
                if not os.path.isdir(os.path.join(shared, "golden", "small")) or not have_onnx:
                    print("SKIP: running cosyvoice-convert (needs the reference data and onnx)")
                    continue
                sys.path.insert(0, os.path.join(ROOT, "tests"))
                import released_folder
                folder = os.path.join(work, c[1])
                released_folder.build(folder, shared)
                out = os.path.join(work, "converted.gguf")
                args = [out if a == c[c.index("-o") + 1] else a for a in c[1:]]
                args[0] = folder
                r = subprocess.run([python, "-m", "cosyvoice.convert"] + args +
                                   ["--dtype", "f32"], cwd=work, env=env, capture_output=True, text=True)
                if r.returncode != 0 or not os.path.exists(out):
                    fail(f"README convert command failed on the released layout: {(r.stdout + r.stderr)[-1500:]}")
                else:
                    state["model"] = out
                    ok(f"ran cosyvoice-convert on a folder of the released layout ({os.path.getsize(out)} bytes)")
            elif prog.endswith("cosyvoice-say"):
                seen.add("say")
                cli = os.path.join(BUILD, "bin", "cosyvoice-say")
                opts, err = help_options([cli], env)
                if opts is None:
                    fail(f"cosyvoice-say --help failed: {err}")
                    continue
                if not check_options("cosyvoice-say", c[1:], opts):
                    continue
                model = state["model"] or os.path.join(BUILD, "demo", "demo.gguf")
                subst = {"-m": model, "--prompt-wav": state["demo_wav"], "-o": os.path.join(work, "say.wav")}
                args, prev = [], None
                for a in c[1:]:
                    args.append(subst.get(prev, a))
                    prev = a
                r = subprocess.run([cli] + args, cwd=work, env=env, capture_output=True, text=True)
                if r.returncode != 0 or wav_frames(os.path.join(work, "say.wav")) <= 0:
                    fail(f"README cosyvoice-say command failed (model {os.path.basename(model)}): "
                         f"{(r.stdout + r.stderr)[-1500:]}")
                else:
                    ok(f"ran the README's cosyvoice-say command with {os.path.basename(model)}: "
                       f"{wav_frames(os.path.join(work, 'say.wav'))} samples")
            elif prog == "pip" and c[1:2] == ["install"]:
                seen.add("pip")
                for a in c[2:]:
                    m = re.fullmatch(r"\./python\[([\w,]+)\]", a)
                    if a == "./python":
                        continue
                    if not m:
                        fail(f"README: pip install {a}: not ./python or ./python[EXTRA]")
                        continue
                    extras = toml_section(pyproject(), "project.optional-dependencies")
                    for x in m.group(1).split(","):
                        if not re.search(r"^" + re.escape(x) + r"\s*=", extras, flags=re.M):
                            fail(f"README: pip install {a}: python/pyproject.toml has no extra {x}")
                        else:
                            ok(f"python/pyproject.toml has the extra {x}")
            elif prog == "cosyvoice-server":
                seen.add("server")
                if 'cosyvoice-server = "cosyvoice.server:main"' not in toml_section(pyproject(), "project.scripts"):
                    fail("README: cosyvoice-server is not a console script of python/pyproject.toml")
                spy = os.environ.get("COSY_README_PYTHON", "")
                if not spy or subprocess.run([spy, "-c", "import fastapi, uvicorn"],
                                             capture_output=True).returncode != 0:
                    print("SKIP: cosyvoice-server's options (no COSY_README_PYTHON with the [server] "
                          "extra: bash tools/setup.sh --venv)")
                    continue
                opts, err = help_options([spy, "-m", "cosyvoice.server"], env)
                if opts is None:
                    fail(f"cosyvoice-server --help failed: {err}")
                    continue
                if check_options("cosyvoice-server", c[1:], opts):
                    state["server"] = (spy, c[1:])
            elif c[:2] == ["make", "test"]:
                pass
            else:
                fail(f"README command {line!r}: tests/test_readme.py does not know how to check it")
    for need in ("setup", "demo", "download", "convert", "say", "pip", "server"):
        if need not in seen:
            fail(f"the README lost its {need} command (tests/test_readme.py expects one)")
    subprocess.run(["rm", "-rf", work])
    if FAILS:
        print(f"test_readme: {len(FAILS)} FAILED")
        return 1
    print("test_readme: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
