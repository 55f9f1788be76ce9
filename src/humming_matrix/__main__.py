import sys

from humming_matrix.cli import main

sys.exit(main())
