"""A parameter study of the SIR epidemic model, as a sweep of independent tasks.

    mpiexec -n 4 python -m hpcgpu.tasks examples/sir.py:run --params examples/sir.csv -o results/sir.h5

Each row of ``sir.csv`` is one (beta, gamma) pair: the contact rate and the
recovery rate, per day. ``run`` integrates Kermack and McKendrick's SIR
equations (Proc. R. Soc. A 115, 700, 1927) for a population fraction
``i0`` infected at day 0,

    dS/dt = -beta S I,   dI/dt = beta S I - gamma I,   dR/dt = gamma I,

and returns the basic reproduction number R0 = beta / gamma, the peak of the
infected fraction and its day, the final size (the fraction ever infected)
and the infected fraction every 10 days. With R(0) = 0 the equations keep
``log(S0 / S) = R0 (1 - S - I)`` at every t (the final-size relation as
t grows), which the tests check the integration against at the last day.
``python examples/sir.py`` writes ``sir.csv`` again.
"""

import os

import numpy as np
from scipy.integrate import solve_ivp

DAYS = 1000
SAMPLE_EVERY = 10


def run(beta, gamma, i0=1e-4):
    """One epidemic: SIR from (S, I, R) = (1 - i0, i0, 0) over ``DAYS`` days. Rates in 1/day."""
    def rhs(t, y):
        s, i, _ = y
        return [-beta * s * i, beta * s * i - gamma * i, gamma * i]

    days = np.arange(0, DAYS + 1, dtype=float)
    sol = solve_ivp(rhs, (0, DAYS), [1 - i0, i0, 0.0], t_eval=days, method="LSODA", rtol=1e-10, atol=1e-12)
    if not sol.success:
        raise RuntimeError(f"the integration failed: {sol.message}")
    s, i, r = sol.y
    peak = int(np.argmax(i))
    return {"R0": beta / gamma, "peak_infected": i[peak], "peak_day": days[peak], "final_size": 1.0 - s[-1],
            "infected": i[::SAMPLE_EVERY]}


def write_params(path):
    """The study: 12 contact rates x 4 recovery rates (R0 from 0.6 to 7.5)."""
    with open(path, "w") as f:
        f.write("beta,gamma\n")
        for beta in np.linspace(0.12, 0.6, 12):
            for gamma in (0.08, 0.1, 0.125, 0.2):
                f.write(f"{beta:.4f},{gamma}\n")


if __name__ == "__main__":
    write_params(os.path.join(os.path.dirname(os.path.abspath(__file__)), "sir.csv"))
