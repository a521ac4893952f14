# run: python
"""The performance model of hpcgpu.scaling on numbers of your own: fit the Allreduce, predict a step."""
import numpy as np

from hpcgpu.scaling import fit_collective_model, fit_line, predict_step

# An Allreduce microbenchmark at P = 2: seconds against message bytes (made up here: 13 us + n / 3.1 GB/s).
nbytes = np.array([1e3, 1e4, 1e5, 1e6, 1e7])
seconds = 13e-6 + nbytes / 3.1e9
alpha_p, beta_p = fit_line(nbytes, seconds)  # Hockney's line alpha_P + beta_P n, fitted in relative error
print(f"P = 2: alpha_P {alpha_p * 1e6:.1f} us, 1/beta_P {1 / beta_p / 1e9:.2f} GB/s")

# The same points seen as 2 log2(P) alpha + 2 (P - 1)/P n beta (the model that extends to large P).
P = np.full(len(nbytes), 2)
alpha, beta = fit_collective_model(P, nbytes, seconds)
print(f"collective model: alpha {alpha * 1e6:.2f} us, 1/beta {1 / beta / 1e9:.2f} GB/s")

# A step of the trainer at a fixed global batch: T(P) = T_comp / min(P, U) + alpha_P + beta_P n.
t_comp, grad = 0.653e-3, 85002 * 4  # one rank's step without communication (s); the float32 gradient (bytes)
for p in (1, 2, 4, 8, 64, 1024):
    a_p, b_p = 2 * np.log2(p) * alpha, 2 * (p - 1) / p * beta  # the collective model at P ranks
    t = predict_step(t_comp, p, units=p, alpha_p=a_p, beta_p=b_p, grad_bytes=grad)  # one GPU or core a rank
    print(f"P = {p:4d}: {t * 1e3:.3f} ms a step, speed-up {t_comp / t:5.2f}, efficiency {t_comp / t / p:.2f}")
