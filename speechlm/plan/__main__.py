import sys

from speechlm.plan import main

sys.exit(main())
