"""python -m cosyvoice.server: the same as the cosyvoice-server command."""
from . import main

main()
