import sys

from agentmemrec.server.cli import main

sys.exit(main())
