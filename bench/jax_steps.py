"""Training steps of JAX with its CUDA plugin, for bench/run-jax-steps.sh: an MLP
(cuBLAS, optax's Adam) and a CNN (cuDNN convolutions through lax.conv, SGD with
momentum), each step jitted, warmed up, then timed in blocks of steps; each step reads
its loss (`float(loss)`), as a training loop that logs does. Prints the lines
bench/run-torch-steps.sh reads: `ABOUT <text>`, `TARGET <name> <ratio>` and
`RESULT <name> <value> <unit>` (the median time of a step over the blocks, and the
last loss). VMCUDA_BENCH_STEPS names a subset ("mlp", "cnn")."""
import os
import statistics
import time

import jax
import jax.numpy as jnp
import optax


def timed(name, step, state, warm=10, blocks=5, per_block=20):
    for _ in range(warm):
        state, loss = step(state)
        float(loss)
    per_step = []
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(per_block):
            state, loss = step(state)
            last = float(loss)
        per_step.append((time.perf_counter() - t0) / per_block * 1e3)
    print(f"RESULT jax_{name}_step {statistics.median(per_step):.3f} ms", flush=True)
    print(f"RESULT jax_{name}_last_loss {last:.6f} loss", flush=True)


def cross_entropy(logits, y):
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


def mlp():
    k = jax.random.split(jax.random.PRNGKey(0), 6)
    sizes = [(256, 1024), (1024, 1024), (1024, 10)]
    params = [(jax.random.normal(k[i], s) * (1.0 / s[0]) ** 0.5, jnp.zeros(s[1])) for i, s in enumerate(sizes)]
    x = jax.random.normal(k[4], (512, 256))
    y = jax.random.randint(k[5], (512,), 0, 10)

    def forward(p, x):
        for i, (w, b) in enumerate(p):
            x = x @ w + b
            if i < len(p) - 1:
                x = jax.nn.gelu(x)
        return x

    opt = optax.adam(1e-3)

    @jax.jit
    def step(state):
        p, s = state
        loss, grads = jax.value_and_grad(lambda p: cross_entropy(forward(p, x), y))(p)
        updates, s = opt.update(grads, s, p)
        return (optax.apply_updates(p, updates), s), loss

    timed("mlp", step, (params, opt.init(params)))


def cnn():
    k = jax.random.split(jax.random.PRNGKey(1), 8)
    chans = [(3, 32), (32, 32), (32, 64), (64, 64), (64, 128)]
    params = {
        "conv": [jax.random.normal(k[i], (o, c, 3, 3)) * (2.0 / (9 * c)) ** 0.5 for i, (c, o) in enumerate(chans)],
        "fc": jax.random.normal(k[5], (128, 10)) * 0.1,
    }
    x = jax.random.normal(k[6], (64, 3, 64, 64))
    y = jax.random.randint(k[7], (64,), 0, 10)

    def forward(p, x):
        for i, w in enumerate(p["conv"]):
            x = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NCHW", "OIHW", "NCHW"))
            x = jax.nn.relu((x - x.mean(axis=(0, 2, 3), keepdims=True)) / (x.std(axis=(0, 2, 3), keepdims=True) + 1e-5))
            if i in (1, 3):
                x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
        return x.mean(axis=(2, 3)) @ p["fc"]

    opt = optax.sgd(0.01, momentum=0.9)

    @jax.jit
    def step(state):
        p, s = state
        loss, grads = jax.value_and_grad(lambda p: cross_entropy(forward(p, x), y))(p)
        updates, s = opt.update(grads, s, p)
        return (optax.apply_updates(p, updates), s), loss

    timed("cnn", step, (params, opt.init(params)))


if __name__ == "__main__":
    print(f"ABOUT jax {jax.__version__} on {jax.devices()[0].device_kind}", flush=True)
    print("TARGET jax_mlp 1.05", flush=True)
    print("TARGET jax_cnn 1.05", flush=True)
    chosen = os.environ.get("VMCUDA_BENCH_STEPS", "mlp cnn").replace(",", " ").split()
    for name in chosen:
        {"mlp": mlp, "cnn": cnn}[name]()
