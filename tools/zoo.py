"""Model zoo: ``python tools/zoo.py --device cuda [--time --compile]`` (see graphfuser/zoo.py)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from graphfuser.zoo import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
