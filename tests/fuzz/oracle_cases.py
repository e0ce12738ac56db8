"""Cases written by hand for the fuzz oracle's tests: a program body and its input specs."""
from __future__ import annotations


def _case(body: str, inputs: list, calls=None) -> dict:
    params = ", ".join(f"{i['name']}: torch.Tensor" for i in inputs)
    src = f"import torch\nimport torch.nn.functional as F\n\n\ndef fn({params}):\n{body}"
    return {"source": src, "inputs": inputs, "calls": calls or [[3, False]] * 4 + [[5, True]] * 3,
            "ops": [], "seed": 1}


X = {"name": "x0", "kind": "tensor", "dtype": "float32", "shape": ["B", 4], "layout": "dense", "fill": "normal",
     "requires_grad": False}
