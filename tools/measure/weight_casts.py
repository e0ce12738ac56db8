"""GPU time of GPT-2's per-call weight casts (fp32 -> bf16): one copy kernel per weight (what
autocast does) against ``executor/weight_casts.BatchedCast`` (one ``torch._foreach_copy_``), both
captured in a CUDA graph and replayed, as a replayed forward runs them.

    PYTHONPATH=. python3 tools/measure/weight_casts.py
"""
import torch

from graphfuser.executor.weight_casts import BatchedCast


def gpt2_weights() -> list[torch.Tensor]:
    shapes = [(50257, 768)]
    for _ in range(12):
        shapes += [(768, 2304), (2304,), (768, 768), (768,), (768, 3072), (3072,), (3072, 768), (768,)]
    return [torch.randn(s, device="cuda") for s in shapes]


def replay_ms(fn, reps: int = 50) -> float:
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    g.replay()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        g.replay()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / reps


def main() -> None:
    ws = gpt2_weights()
    batched = BatchedCast(tuple(torch.bfloat16 for _ in ws))
    nbytes = sum(w.numel() * 6 for w in ws)
    one = replay_ms(lambda: [w.to(torch.bfloat16) for w in ws])
    many = replay_ms(lambda: batched(*ws))
    assert all(torch.equal(a, b) for a, b in zip(batched(*ws), [w.to(torch.bfloat16) for w in ws]))
    print(f"{torch.cuda.get_device_name()}: {len(ws)} casts, {nbytes / 1e6:.0f} MB moved; "
          f"one kernel each {one:.3f} ms ({nbytes / one / 1e9:.0f} TB/s), "
          f"batched {many:.3f} ms ({nbytes / many / 1e9:.0f} TB/s)")


if __name__ == "__main__":
    main()
