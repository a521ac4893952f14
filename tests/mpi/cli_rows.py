"""A table of command lines of hpcgpu's programs, each run in turn in this one launch of ranks as ``python -m MODULE``
runs it: the module's ``main(argv)`` under :func:`hpcgpu.run_guarded` with ``prog=MODULE``, each rank's stdout and
stderr caught.

Usage: cli_rows.py ROWS.json RESULTS.json

ROWS.json: ``{case: ["-m", MODULE, *argv]}``. RESULTS.json (rank 0 writes it): ``{case: {"returncode": int,
"stdout": rank 0's, "stderr": rank 0's, "others": what the other ranks wrote}}``.

A bad-input table's rows are refused before any collective work, with an agreed error: every rank leaves the row
with the same exit status, and the next row starts on a clean communicator. A row that aborted the job instead
(MPI_Abort) ends the launch, and the test sees that no results came.
"""

import contextlib
import importlib
import io
import json
import sys

from mpi4py import MPI

from hpcgpu import run_guarded

rows_path, results_path = sys.argv[1:3]
comm = MPI.COMM_WORLD
with open(rows_path, encoding="utf-8") as f:
    rows = json.load(f)
results = {}
for case, (dash_m, module, *argv) in rows.items():
    assert dash_m == "-m", rows[case]
    mod = importlib.import_module(module)
    main = importlib.import_module(f"{module}.__main__").main if hasattr(mod, "__path__") else mod.main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            run_guarded(main, argv, prog=module)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    each = comm.gather((code, out.getvalue(), err.getvalue()))
    if comm.rank == 0:
        codes = {c for c, _, _ in each}
        results[case] = {"returncode": code if len(codes) == 1 else f"differ: {[c for c, _, _ in each]}",
                         "stdout": each[0][1], "stderr": each[0][2],
                         "others": "".join(o + e for _, o, e in each[1:])}
if comm.rank == 0:
    with open(results_path, "w", encoding="utf-8") as f:
        json.dump(results, f)
