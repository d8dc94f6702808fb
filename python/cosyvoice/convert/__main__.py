"""python -m cosyvoice.convert: the cosyvoice-convert command."""
import sys

from .converter import main

sys.exit(main())
