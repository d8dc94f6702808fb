"""Reproduce `torch.manual_seed(seed); torch.randn(shape)` on the CPU without torch.

torch's CPU generator is MT19937 seeded with init_genrand(seed) - the same engine and seeding as
numpy's legacy RandomState(seed) - whose raw 32-bit outputs we take through
RandomState.randint(0, 2**32, dtype=uint32) (for the full 32-bit range numpy returns the raw
words). torch.randn (float32, numel >= 16) then
  1. draws numel uniforms u = (word & 0xFFFFFF) * 2^-24, one word each;
  2. for every block of 16: for j < 8, r = sqrt(-2 ln(1 - u[j])), th = 2 pi u[j+8],
     out[j] = r cos th, out[j+8] = r sin th;
  3. if numel % 16 != 0, draws 16 fresh uniforms for the last 16 elements and redoes step 2 there.
torch evaluates step 2 in float32 (vectorised with SLEEF where AVX2 exists); we round where it
rounds (see _box_muller16), so values agree to one or two float32 ulps.
"""
import numpy as np


def _words(seed, n):
    rs = np.random.RandomState(seed)
    return rs.randint(0, 2**32, size=n, dtype=np.uint32)


def _box_muller16(u):
    """u: float32 uniforms, blocks of 16. torch's AVX2 path forms theta = float32(2 pi) * u2 in
    float32 (that rounding matters: up to ~1e-6 at |z| ~ 3), so we do the same; the rest in
    float64, each factor rounded to float32 as torch stores it."""
    u = u.reshape(-1, 16)
    u1 = (np.float32(1.0) - u[:, :8]).astype(np.float64)
    th = (np.float32(2.0 * np.pi) * u[:, 8:]).astype(np.float64)
    r = np.sqrt(-2.0 * np.log(u1)).astype(np.float32)
    c = np.cos(th).astype(np.float32)
    s = np.sin(th).astype(np.float32)
    return np.concatenate([r * c, r * s], axis=1).reshape(-1)


def randn(seed, shape):
    n = int(np.prod(shape))
    if n < 16:
        raise ValueError("randn emulation covers numel >= 16 only")
    extra = 16 if n % 16 else 0
    w = _words(seed, n + extra)
    u = ((w[:n] & 0xFFFFFF).astype(np.float64) * 2.0**-24).astype(np.float32)
    out = np.empty(n, dtype=np.float32)
    full = n - n % 16
    out[:full] = _box_muller16(u[:full])
    if extra:
        u_last = ((w[n:] & 0xFFFFFF).astype(np.float64) * 2.0**-24).astype(np.float32)
        out[n - 16:] = _box_muller16(u_last)
    return out.reshape(shape)


# Values printed by torch (docs/model-format.md section 6) for torch.manual_seed(0); randn(1,80,15000)
FLOW_NOISE_CHECK = {
    "row0": [-1.1258398, -1.1523602, -0.2505786, -0.4338788, 0.8487104],
    "row1": [0.8691794, 0.5761968, -0.4119531],
    "sum": -1291.2013939,
}


def flow_noise(frames=15000, mels=80):
    """The flow's fixed noise buffer rand_noise[0] ([mels, frames]), checked against torch."""
    z = randn(0, (1, mels, frames))[0]
    if mels == 80 and frames == 15000:
        ok = (np.allclose(z[0, :5], FLOW_NOISE_CHECK["row0"], atol=1e-6)
              and np.allclose(z[1, :3], FLOW_NOISE_CHECK["row1"], atol=1e-6)
              and abs(float(z.astype(np.float64).sum()) - FLOW_NOISE_CHECK["sum"]) < 5e-3)
        if not ok:
            raise RuntimeError("flow noise emulation disagrees with torch's reference values")
    return z
