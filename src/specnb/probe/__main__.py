"""``python -m specnb.probe``: the probe's command line (:func:`specnb.probe.run.main`)."""

import sys

from specnb.probe.run import main

sys.exit(main())
