import sys

from metaservice_demo.demo import main

sys.exit(main())
