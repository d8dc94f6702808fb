"""Thin wrapper kept so that `import ptread` from tools/ (tools/make_model.py, the tests) keeps
working: the module is python/cosyvoice/convert/ptread.py of the cosyvoice package."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from cosyvoice.convert import ptread as _module  # noqa: E402

sys.modules[__name__] = _module
