"""``python -m graphfuser race`` from a checkout; the code is in graphfuser/tools/."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
if __name__ == "__main__":
    from graphfuser.tools.race import main
    sys.exit(main())
