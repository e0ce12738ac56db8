"""``python -m graphfuser hf_zoo`` from a checkout; the code is in graphfuser/tools/."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
if __name__ == "__main__":
    from graphfuser.tools.hf_zoo import main
    sys.exit(main())
