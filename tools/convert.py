#!/usr/bin/env python3
"""Thin wrapper of the cosyvoice-convert command (python/cosyvoice/convert/converter.py) for a
checkout without the package installed:

    tools/convert.py RELEASED_FOLDER -o model.gguf [--rl] [--dtype bf16|f16|f32] ...

`import convert` from tools/ (tools/make_model.py, the tests) gets the converter module itself.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from cosyvoice.convert import converter as _module  # noqa: E402

if __name__ == "__main__":
    sys.exit(_module.main(prog="convert.py"))
sys.modules[__name__] = _module
