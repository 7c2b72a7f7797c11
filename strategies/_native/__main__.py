"""``python -m strategies._native``: build tfdist's native kernels for the installed TensorFlow."""
import sys

from strategies._native import main

sys.exit(main(sys.argv[1:]))
