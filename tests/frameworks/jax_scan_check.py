"""JAX's lax.scan and while_loop through vmcuda's driver, each jitted function run
twice on other buffers (tests/frameworks/jax-scan.sh runs it against the host-memory
test double). XLA runs the loops as CUDA graphs with conditional nodes and child graphs
moved into their nodes, and updates the executable graph for the second run
(cuGraphExecMemcpyNodeSetParams on nodes of the moved child graphs: issue 33). On the
double kernels do not run, so the values are not checked; every step must return."""
import time

t0 = time.time()
# JAX looks for a GPU at /dev/nvidia0 or /dev/nvidiactl before it loads its CUDA
# plugin; a guest has neither (vmcuda's driver needs no device file).
import jax._src.hardware_utils as hardware  # noqa: E402

hardware._NVIDIA_GPU_DEVICES.append("/dev/null")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402


def step(name):
    print(f"{name}: ok ({time.time() - t0:.1f} s since start)", flush=True)


devices = jax.devices()
assert devices[0].platform == "gpu", devices
step(f"jax {jax.__version__}, devices {devices}")
w = jnp.asarray(np.random.RandomState(14).randn(64, 64).astype(np.float32) * 0.1)


def body(h, x):
    h = jnp.tanh(h @ w + x)
    return h, h.sum()


xs = jnp.asarray(np.random.RandomState(15).randn(200, 8, 64).astype(np.float32))
scan = jax.jit(lambda h0, xs: lax.scan(body, h0, xs))
h, ys = scan(jnp.zeros((8, 64)), xs)
jax.block_until_ready((h, ys))
step("lax.scan, first run")
h2, ys2 = scan(h, xs)  # the same executable again, other buffers: the graph is updated
jax.block_until_ready((h2, ys2))
step("lax.scan, second run (other buffers)")


def count(x):
    return lax.while_loop(lambda c: c[0] < 100, lambda c: (c[0] + 1, c[1] * 1.01), (0, x))[1]


loop = jax.jit(count)
jax.block_until_ready(loop(jnp.ones(1024)))
jax.block_until_ready(loop(jnp.full(1024, 2.0)))
step("lax.while_loop, two runs")
