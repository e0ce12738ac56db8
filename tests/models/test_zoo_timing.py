"""The zoo's timing interleaves the backends and takes the median of rounds (CPU, no models)."""
import time

from graphfuser.tools.zoo import time_interleaved


def test_rounds_interleave_backends():
    order = []
    fns = {k: (lambda k=k: order.append(k)) for k in ("eager", "jit", "graphfuser")}
    out = time_interleaved(fns, "cpu", reps=6, rounds=3, warmup=1)
    assert set(out) == set(fns)
    timed = order[3 * 2:]          # after each backend's warmup and its one-call estimate
    # each round runs one backend's calls, then the next's: the labels change in the fixed cycle
    runs = [k for i, k in enumerate(timed) if i == 0 or timed[i - 1] != k]
    assert runs == ["eager", "jit", "graphfuser"] * 3


def test_one_slow_round_does_not_decide():
    calls = {"n": 0}

    def noisy():
        calls["n"] += 1
        # every call of one middle stretch is slow (a noisy moment), the rest fast
        time.sleep(0.02 if 40 <= calls["n"] < 60 else 0.0005)

    out = time_interleaved({"fast": lambda: time.sleep(0.0005), "noisy": noisy}, "cpu", reps=5, rounds=5,
                           warmup=1)
    assert out["noisy"] < 2 * out["fast"] + 0.3     # the mean of all calls would be ~2 ms
