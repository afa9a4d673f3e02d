import sys

from gitlab_knowledge.cli import main

sys.exit(main())
