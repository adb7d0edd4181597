"""JAX on the GPU, for the guest driver.

Run natively and through vmcuda (tests/gpu/run-torch-libs.sh with
VMCUDA_CHECKS_SCRIPT=tests/gpu/jax_check.py, or tests/gpu/run-jax.sh): JAX keeps its
own CUDA plugin and NVIDIA's libraries (cuBLAS, cuDNN, cuFFT, cuSOLVER), and only
libcuda.so.1 is vmcuda's in the bridged run. Each check computes on the GPU, compares
with JAX's CPU backend (or numpy) itself, and records numbers the harness compares
between the runs:
    python jax_check.py --json OUT.json
"""
import os
import time

import numpy as np
import jax
import jax.numpy as jnp
from jax import lax

import checklib

results = {"checks": {}, "values": {}, "errors": {}, "timings": {}}
CHECKS = []
CPU = jax.devices("cpu")[0]
# Full fp32 products on the GPU (its default takes TF32/bf16 passes), so the results
# can be held to the CPU's.
jax.config.update("jax_default_matmul_precision", "highest")


def check(fn):
    CHECKS.append(fn)
    return fn


def record(name, ok, values):
    results["checks"][name] = "PASS" if ok else "FAIL"
    results["values"][name] = [float(v) for v in values]


def gpu():
    devs = jax.devices()
    # VMCUDA_CHECKS_ALLOW_CPU=1: a dry run of the checks themselves on a machine with
    # no GPU (their numbers then say nothing about one).
    if devs[0].platform != "gpu" and not os.environ.get("VMCUDA_CHECKS_ALLOW_CPU"):
        raise RuntimeError(f"JAX found no GPU: {devs}")
    return devs[0]


def seeded(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def on_cpu(fn, *args):
    return np.asarray(jax.jit(fn, device=CPU)(*[jax.device_put(a, CPU) for a in args]))


def close(a, b, rtol, atol):
    return bool(np.allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol))


@check
def devices():
    d = gpu()
    record("devices", d.platform == "gpu", [len(jax.devices(d.platform))])


@check
def jit_matmul():
    gpu()
    a, b = seeded(512, 256, seed=1), seeded(256, 384, seed=2)
    f = lambda x, y: jnp.tanh(x @ y) * 2.0  # noqa: E731
    t0 = time.perf_counter()
    out = np.asarray(jax.jit(f)(a, b))
    results["timings"]["first jit call (matmul)"] = time.perf_counter() - t0
    ref = np.tanh(a.astype(np.float64) @ b.astype(np.float64)) * 2.0
    record("jit_matmul", close(out, ref, 2e-2, 2e-2), [out.sum(), np.abs(out).sum()])


@check
def grad():
    gpu()
    x = seeded(1000, seed=3)
    f = lambda v: jnp.sum(jnp.sin(v) ** 2 + v**3)  # noqa: E731
    g = np.asarray(jax.jit(jax.grad(f))(x))
    ref = 2 * np.sin(x) * np.cos(x) + 3 * x**2
    record("grad", close(g, ref, 1e-4, 1e-4), [g.sum()])


def mlp_init(seed):
    rng = np.random.default_rng(seed)
    sizes = [(64, 128), (128, 128), (128, 10)]
    return [(rng.standard_normal(s).astype(np.float32) * 0.1, np.zeros(s[1], np.float32)) for s in sizes]


def mlp(params, x):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def loss_fn(params, x, y):
    logits = mlp(params, x)
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, 10), axis=-1))


@check
def optax_training():
    import optax

    gpu()
    params = jax.device_put(mlp_init(4))
    opt = optax.adam(1e-2)
    state = opt.init(params)
    x = jnp.asarray(seeded(256, 64, seed=5))
    y = jnp.asarray(np.random.default_rng(6).integers(0, 10, 256))

    @jax.jit
    def step(p, s):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        updates, s = opt.update(g, s, p)
        return optax.apply_updates(p, updates), s, loss

    losses = []
    for _ in range(30):
        params, state, loss = step(params, state)
        losses.append(float(loss))
    times = []
    for _ in range(50):
        t0 = time.perf_counter()
        params, state, loss = step(params, state)
        loss.block_until_ready()
        times.append(time.perf_counter() - t0)
    results["timings"]["jitted training step (median)"] = float(np.median(times))
    record("optax_training", losses[-1] < losses[0] * 0.5, losses[::5] + [losses[-1]])


@check
def cudnn_conv():
    gpu()
    x, w = seeded(8, 16, 32, 32, seed=7), seeded(32, 16, 3, 3, seed=8)
    f = lambda a, b: lax.conv_general_dilated(a, b, (1, 1), "SAME")  # noqa: E731
    out = np.asarray(jax.jit(f)(x, w))
    ref = on_cpu(f, x, w)
    gx = np.asarray(jax.jit(jax.grad(lambda a, b: jnp.sum(f(a, b) ** 2)))(x, w))
    record("cudnn_conv", close(out, ref, 1e-2, 1e-2) and np.isfinite(gx).all(),
           [out.sum(), np.abs(out).sum(), np.abs(gx).sum()])


@check
def fft():
    gpu()
    x = seeded(128, 256, seed=9) + 1j * seeded(128, 256, seed=10)
    out = np.asarray(jax.jit(jnp.fft.fft2)(x.astype(np.complex64)))
    ref = np.fft.fft2(x)
    r = np.asarray(jax.jit(jnp.fft.rfft)(seeded(4096, seed=11)))
    record("fft", close(out, ref, 1e-3, 1e-2), [np.abs(out).sum(), np.abs(r).sum()])


@check
def linalg():
    gpu()
    a = seeded(128, 128, seed=12)
    spd = a @ a.T + 128 * np.eye(128, dtype=np.float32)
    b = seeded(128, 4, seed=13)
    chol = np.asarray(jax.jit(jnp.linalg.cholesky)(spd))
    sol = np.asarray(jax.jit(jnp.linalg.solve)(spd, b))
    s = np.asarray(jax.jit(lambda m: jnp.linalg.svd(m, compute_uv=False))(a))
    q, r = jax.jit(jnp.linalg.qr)(a)
    qr_err = float(np.abs(np.asarray(q) @ np.asarray(r) - a).max())
    ok = (close(chol @ chol.T, spd, 1e-3, 1e-2) and close(spd @ sol, b, 1e-3, 1e-3)
          and close(s, np.linalg.svd(a, compute_uv=False), 1e-3, 1e-3) and qr_err < 1e-3)
    record("linalg", ok, [np.abs(chol).sum(), sol.sum(), s.sum()])


@check
def scan_loop():
    gpu()
    w = jnp.asarray(seeded(64, 64, seed=14) * 0.1)

    def body(h, x):
        h = jnp.tanh(h @ w + x)
        return h, h.sum()

    xs = jnp.asarray(seeded(200, 8, 64, seed=15))
    f = jax.jit(lambda h0, xs: lax.scan(body, h0, xs))
    h, ys = f(jnp.zeros((8, 64)), xs)
    h2, ys2 = f(h, xs)  # the same executable again, other buffers
    ref_h, ref_ys = jax.jit(lambda h0, xs: lax.scan(body, h0, xs), device=CPU)(
        jax.device_put(np.zeros((8, 64), np.float32), CPU), jax.device_put(np.asarray(xs), CPU))
    record("scan_loop", close(h, ref_h, 1e-3, 1e-3) and close(ys, ref_ys, 1e-2, 1e-2),
           [np.asarray(ys).sum(), np.asarray(ys2).sum()])


@check
def while_loop():
    gpu()

    def f(x):
        def cond(c):
            return c[0] < 100

        def body(c):
            i, v = c
            return i + 1, v * 0.99 + jnp.sin(v)

        return lax.while_loop(cond, body, (0, x))[1]

    x = seeded(4096, seed=16)
    out = np.asarray(jax.jit(f)(x))
    ref = on_cpu(f, x)
    record("while_loop", close(out, ref, 1e-3, 1e-3), [out.sum()])


@check
def donation():
    gpu()
    f = jax.jit(lambda x: x * 2 + 1, donate_argnums=0)
    x = jnp.asarray(seeded(1 << 20, seed=17))
    host = np.asarray(x)
    y = f(x)
    ok = x.is_deleted() and close(y, host * 2 + 1, 1e-6, 1e-6)
    record("donation", ok, [np.asarray(y).sum()])


@check
def rng():
    gpu()
    key = jax.random.PRNGKey(42)
    g = np.asarray(jax.jit(lambda k: jax.random.normal(k, (1 << 16,)))(key))
    c = on_cpu(lambda k: jax.random.normal(k, (1 << 16,)), key)
    record("rng", close(g, c, 1e-5, 1e-5), [g.sum(), (g * g).sum()])


@check
def transfer_256mib():
    gpu()
    host = np.random.default_rng(18).integers(0, 255, 256 << 20, dtype=np.uint8)
    t0 = time.perf_counter()
    d = jax.device_put(host)
    d.block_until_ready()
    t1 = time.perf_counter()
    back = np.asarray(d)
    t2 = time.perf_counter()
    results["timings"]["256 MiB to the GPU"] = t1 - t0
    results["timings"]["256 MiB from the GPU"] = t2 - t1
    s = int(jax.jit(lambda v: jnp.sum(v.astype(jnp.uint32)))(d))
    # The uint32 sum wraps; compare it modulo 2**32.
    record("transfer_256mib", bool((back == host).all()) and s == int(host.astype(np.uint64).sum()) % (1 << 32),
           [s])


def describe():
    results["framework"] = f"jax {jax.__version__}"
    try:
        results["device"] = jax.devices()[0].device_kind
    except Exception as e:  # no GPU is a result of every check
        results["device"] = f"none ({e})"


if __name__ == "__main__":
    checklib.main(CHECKS, results, describe)
