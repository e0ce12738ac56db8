import sys, traceback, torch
sys.path[:0] = ["tests", "tests/autodiff"]
import test_norm_grads as T
from grad_helpers import check_grads, make_function
print("== clamp semantics on", torch.cuda.get_device_name())
nan = float("nan")
for dt in (torch.float32, torch.float16, torch.float64):
    x = torch.tensor([0.0, 1.0, nan, -2.0], dtype=dt, device="cuda")
    for label, f in [("clamp(min=nan)", lambda x: torch.clamp(x, min=nan)), ("clamp(max=nan)", lambda x: torch.clamp(x, max=nan)),
                     ("clamp(-0.5,nan)", lambda x: torch.clamp(x, -0.5, nan)), ("clamp(nan,1)", lambda x: torch.clamp(x, nan, 1.0)),
                     ("clamp_min(nan)", lambda x: torch.clamp_min(x, nan)), ("clamp_max(nan)", lambda x: torch.clamp_max(x, nan)),
                     ("x.clamp_(min=nan)", lambda x: x.clone().clamp_(min=nan))]:
        print(dt, label, f(x).tolist())
for dtype in T.FLOATS:
    tol = T._tol(dtype)
    for case in ("layer_norm", "rms_norm", "var_mean", "std", "prod"):
        fn = make_function(["x", "y", "w", "b"], T.ROW_CASES[case])
        inputs = [t.detach().cuda().requires_grad_() for t in T._inputs(dtype, "dense", 64, 257)]
        if case == "prod":
            inputs[0] = (inputs[0].detach() * 0.1 + 1.0).requires_grad_()
        try:
            check_grads(fn, inputs, tol); print(dtype, case, "ok")
        except Exception as e:
            print(dtype, case, "FAIL", str(e)[:600])
    for case in ("batch_norm_train_no_stats", "group_norm", "instance_norm", "batch_norm_eval"):
        fn = make_function(["x", "w", "b", "rm", "rv"], [T.CHANNEL_CASES[case]])
        for layout in ("dense", "channels_last"):
            inputs = [t.detach().cuda() for t in T._channel_inputs(dtype, layout, (8, 16, 9, 7))]
            for t in inputs[:3]:
                t.requires_grad_()
            try:
                check_grads(fn, inputs, tol); print(dtype, case, layout, "ok")
            except Exception as e:
                print(dtype, case, layout, "FAIL", str(e)[:600])
