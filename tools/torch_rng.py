"""Thin wrapper kept so that `import torch_rng` from tools/ (tools/make_model.py, the tests) keeps
working: the module is python/cosyvoice/convert/torch_rng.py of the cosyvoice package."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from cosyvoice.convert import torch_rng as _module  # noqa: E402

sys.modules[__name__] = _module
