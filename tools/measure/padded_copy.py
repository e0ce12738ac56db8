"""Copy of a GEMM's padded-row result into eager's contiguous layout (passes/gemm_pad.py): GPT-2's
logits, [M, 50257] read from rows of 50264. ``copy_`` (PyTorch's strided copy kernel) against a
2-D memcpy (``cuMemcpy2DAsync``: source and destination pitches) and the bandwidth of a plain
contiguous copy of the same bytes.

    PYTHONPATH=$PWD python tools/measure/padded_copy.py [--m 4096] [--n 50257] [--pad 7]
"""
import argparse

import torch


def _ms(fn, reps=50):
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def memcpy2d(dst: torch.Tensor, src: torch.Tensor) -> None:
    from cuda.bindings import driver

    p = driver.CUDA_MEMCPY2D()
    p.srcMemoryType = p.dstMemoryType = driver.CUmemorytype.CU_MEMORYTYPE_DEVICE
    p.srcDevice, p.dstDevice = src.data_ptr(), dst.data_ptr()
    p.srcPitch = src.stride(0) * src.element_size()
    p.dstPitch = dst.stride(0) * dst.element_size()
    p.WidthInBytes = src.shape[1] * src.element_size()
    p.Height = src.shape[0]
    err, = driver.cuMemcpy2DAsync(p, torch.cuda.current_stream().cuda_stream)
    assert int(err) == 0, err


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=4096)
    ap.add_argument("--n", type=int, default=50257)
    ap.add_argument("--pad", type=int, default=7)
    a = ap.parse_args()
    print(torch.cuda.get_device_name())
    for dtype in (torch.bfloat16, torch.float32):
        padded = torch.randn(a.m, a.n + a.pad, device="cuda").to(dtype)
        src = padded[:, :a.n]
        dst = torch.empty(a.m, a.n, device="cuda", dtype=dtype)
        flat = torch.empty_like(dst)
        gb = 2 * dst.numel() * dst.element_size() / 1e9
        rows = {
            "copy_": lambda: dst.copy_(src),
            "contiguous": lambda: src.contiguous(),
            "memcpy2d": lambda: memcpy2d(dst, src),
            "plain contiguous copy": lambda: flat.copy_(dst),
        }
        for name, fn in rows.items():
            ms = _ms(fn)
            print(f"{str(dtype):16} {name:24} {ms * 1e3:8.1f} us  {gb / ms * 1e3:6.0f} GB/s")
        memcpy2d(dst, src)
        assert torch.equal(dst, src)


if __name__ == "__main__":
    main()
