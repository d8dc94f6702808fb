import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cosy_test_support as support  # noqa: E402


@pytest.fixture(scope="session")
def model_path():
    p = support.test_model()
    if not p:
        pytest.skip("no test model: `make build/test/small-f32.gguf` (needs ../shared) or set "
                    "COSY_TEST_MODEL")
    return p


@pytest.fixture(scope="session")
def engine(model_path):
    import cosyvoice
    with cosyvoice.Engine(model_path, max_active=4) as eng:
        yield eng


@pytest.fixture(scope="session")
def voice(engine):
    with support.make_voice(engine) as v:
        yield v
