import sys

from markovformer.cli.main import main

sys.exit(main())
