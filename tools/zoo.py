"""Model zoo: ``python tools/zoo.py --device cuda [--time --compile]`` (see graphfuser/zoo.py);
``python tools/zoo.py --train ...``: a few SGD steps per model, eager vs graphfuser (graphfuser/zoo_train.py)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

if __name__ == "__main__":
    if "--train" in sys.argv[1:]:
        from graphfuser.tools.zoo_train import main  # noqa: E402
    else:
        from graphfuser.tools.zoo import main  # noqa: E402
    raise SystemExit(main())
