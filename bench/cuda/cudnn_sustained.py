# cuDNN SDPA, bf16, B*S=16k, H*D=2048, back to back for ~6 s (the chip at its power cap):
#   python3 cudnn_sustained.py S CAUSAL(0|1) [D (default 128)]
import time, torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
import sys
s, causal = int(sys.argv[1]), sys.argv[2] == "1"
d = int(sys.argv[3]) if len(sys.argv) > 3 else 128
b, h = 16384 // s, 2048 // d
q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    for _ in range(10): F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.cuda.synchronize()
    t0 = time.time(); n = 0
    e0 = torch.cuda.Event(enable_timing=True); e1 = torch.cuda.Event(enable_timing=True)
    e0.record()
    while time.time() - t0 < 6:
        for _ in range(50): F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        n += 50
        torch.cuda.synchronize()
    e1.record(); torch.cuda.synchronize()
    ms = e0.elapsed_time(e1) / n
    print(f"cudnn D={d} S={s} causal={causal} back-to-back: {ms:.3f} ms/launch, {4*b*h*(s*(s+1)/2 if causal else s*s)*d/ms/1e9:.1f} TFLOP/s over {n} launches")
