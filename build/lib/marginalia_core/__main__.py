import sys

from marginalia_core.cli import main

sys.exit(main())
