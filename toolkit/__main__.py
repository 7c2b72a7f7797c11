"""`python -m toolkit` is the same as the `tfdist` command."""
import sys

from toolkit.cli import main

sys.exit(main())
