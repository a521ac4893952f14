"""Outputs lose nothing: FILE:DATASET adds or replaces one dataset, an input is never an output, a file another
process writes is never replaced."""

import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
from _data import blobs, write_h5

import _mpi
from hpcgpu._outputs import Input, Output, claim_error, written_by_hpcgpu
from hpcgpu.io import held_error, temp_keeping

HOLD = """
import sys, h5py
f = h5py.File(sys.argv[1], "r+")
print("holding", flush=True)
sys.stdin.readline()
f["written_while_held"] = [1, 2, 3]
f.close()
"""


@pytest.fixture
def holder():
    """Start a process that holds an HDF5 file open in r+ (as another program of the user's would)."""
    procs = []

    def start(path, env=None):
        p = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env={**os.environ, **(env or {})})
        assert p.stdout.readline().strip() == "holding"
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def _release(p):
    p.stdin.write("\n")
    p.stdin.flush()
    assert p.wait(timeout=30) == 0


def _one_line_exit_2(p):
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    return lines[0]


# -- the library's checks -----------------------------------------------------------

def test_a_file_open_in_this_process_is_still_known_as_hpcgpus(tmp_path):
    """HDF5 refuses a second open with other locking flags: the mark is read as the process has the file open."""
    from hpcgpu.io import atomic_path, new_hdf5

    with atomic_path(tmp_path / "ours.h5") as tmp, new_hdf5(tmp) as f:
        f["x"] = np.zeros(2)
    theirs = write_h5(tmp_path / "theirs.h5", x=np.zeros(2))
    with h5py.File(tmp_path / "ours.h5", "r"), h5py.File(theirs, "r"):
        assert written_by_hpcgpu(tmp_path / "ours.h5") is True
        assert written_by_hpcgpu(theirs) is False


_DATA_AS_ARRAYS = """
import os, sys, h5py, numpy as np, hpcgpu
from hpcgpu import nn, optim
rt = hpcgpu.init("cpu")
rng = np.random.default_rng(0)
X, y = rng.normal(size=(90, 4)), rng.integers(0, 3, 90)
if rt.rank == 0:
    with h5py.File("data.h5", "w") as f:
        f["train/X"], f["train/y"] = X, y
    np.save("X.npy", X)
rt.comm.Barrier()


def trainer(**kw):
    return hpcgpu.Trainer(nn.Sequential(nn.Dense(4, 3)), nn.SoftmaxCrossEntropy(), optim.Adam(), batch_size=15,
                          epochs=1, seed=0, runtime=rt, progress="none", overwrite=True, **kw)


def refused(f):
    try:
        f()
    except hpcgpu.AgreedError as e:
        return str(e)
    return "not refused"


lines = []
with h5py.File("data.h5", "r") as f:  # h5py datasets given to fit: their file is an input
    lines.append(refused(lambda: trainer(out="data.h5").fit((f["train/X"], f["train/y"]))))
    t = trainer(out="r.h5")
    t.fit((f["train/X"], f["train/y"]))
    lines.append(refused(lambda: t.predict(X, out="data.h5:/train/y")))
    lines.append(refused(lambda: t.save_results("data.h5")))
    lines.append(refused(lambda: t.save_checkpoint("data.h5")))
    t.close()
    t = trainer()  # data in memory; predict's X an h5py dataset: its file is predict's input
    t.fit((X, y))
    lines.append(refused(lambda: t.predict(f["train/X"], out="data.h5:/train/X")))
    t.predict(f["train/X"], out="data.h5:/y_hat")  # another dataset of that file, as with predict("data.h5:...")
    t.close()
Xm = np.load("X.npy", mmap_mode="r")  # a memory map given to fit: its file is an input
lines.append(refused(lambda: trainer(out="X.npy").fit((Xm, y))))
with h5py.File("data.h5", "r") as f:
    kept = sorted(f["train"]) == ["X", "y"] and np.array_equal(f["train/y"][:], y) and f["y_hat"].shape == (90, 3)
lines.append(f"kept {kept} {np.array_equal(np.load('X.npy'), X)}")
open(f"lines.{rt.rank}", "w").write("\\n".join(lines) + "\\n")  # every rank's lines, each in its file
"""


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 3])
def test_arrays_read_from_a_file_make_it_an_input_of_every_output(tmp_path, nprocs):
    """h5py datasets (or a NumPy memory map) given to fit: no output of the run may replace their file, even with
    overwrite=True (a results file over the data file replaced the user's data: found by a new user's trial); an h5py
    dataset given to predict is its input likewise (another dataset of its file may be written)."""
    p = _mpi.run(nprocs, ["-c", _DATA_AS_ARRAYS], timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    data = tmp_path / "data.h5"
    assert _mpi.rank_lines(tmp_path, nprocs) == [[  # every rank raised the same
        f"out data.h5: is also an input (data {data}:/train/X); writing it would replace what is read: choose "
        "another output",
        f"out data.h5:/train/y: is also an input (data {data}:/train/y); writing it would replace what is read: "
        "choose another output",
        f"save_results data.h5: is also an input (data {data}:/train/X); writing it would replace what is read: "
        "choose another output",
        f"save_checkpoint data.h5: is also an input (data {data}:/train/X); writing it would replace what is "
        "read: choose another output",
        f"out data.h5:/train/X: is also an input (X {data}:/train/X); writing it would replace what is read: choose "
        "another output",
        f"out X.npy: is also an input (data {tmp_path / 'X.npy'}); writing it would replace what is read: choose "
        "another output",
        "kept True True"]] * nprocs

def test_temp_keeping_copies_everything_but_the_dataset(tmp_path):
    path = tmp_path / "keep.h5"
    with h5py.File(path, "w") as f:
        f.attrs["note"] = "the user's"
        f["A"] = np.arange(6.0).reshape(2, 3)
        f["A"].attrs["units"] = "m"
        f["grp/C"] = np.zeros(4)
        f["grp/D"] = np.ones(2)
        f["grp"].attrs["g"] = 7
        f["soft"] = h5py.SoftLink("/A")
        f["ext"] = h5py.ExternalLink("other.h5", "/X")
    tmp = temp_keeping(path, "/grp/C/")
    try:
        with h5py.File(tmp) as f:
            assert f.attrs["note"] == "the user's" and f["grp"].attrs["g"] == 7
            np.testing.assert_array_equal(f["A"][()], np.arange(6.0).reshape(2, 3))
            assert f["A"].attrs["units"] == "m" and "C" not in f["grp"] and list(f["grp/D"][()]) == [1, 1]
            assert f.get("soft", getlink=True).path == "/A"
            assert f.get("ext", getlink=True).filename == "other.h5"
    finally:
        os.unlink(tmp)


def test_temp_keeping_refuses_a_group_and_a_file_that_is_not_hdf5(tmp_path):
    path = tmp_path / "g.h5"
    write_h5(path, grp__x=np.zeros(2))
    with pytest.raises(OSError, match="is a group in that file, not a dataset"):
        temp_keeping(path, "grp")
    text = tmp_path / "notes.txt"
    text.write_text("mine\n")
    with pytest.raises(OSError, match="exists and is not a readable HDF5 file"):
        temp_keeping(text, "C")
    assert text.read_text() == "mine\n"
    assert sorted(os.listdir(tmp_path)) == ["g.h5", "notes.txt"]  # no temporary left


def test_an_input_is_never_an_output(tmp_path):
    a = write_h5(tmp_path / "a.h5", A=np.eye(2), B=np.eye(2))
    assert "is also an input" in str(claim_error([Output(a, "-o", dataset="/A")], [Input(a, "A", "A")]))
    assert claim_error([Output(a, "-o", dataset="C")], [Input(a, "A", "A")]) is None  # another dataset, same file
    assert "is also an input" in str(claim_error([Output(a, "-o", dataset="A/x")], [Input(a, "A", "A")]))  # under it
    assert "is also an input" in str(claim_error([Output(a, "--out")], [Input(a, "--data")]))  # the whole file
    other = tmp_path / "link.h5"  # the same file by another name
    os.symlink(a, other)
    assert "is also an input" in str(claim_error([Output(other, "--out")], [Input(a, "--data")]))


def test_the_mark_says_what_hpcgpu_wrote(tmp_path):
    """Only files with hpcgpu's mark are replaced without --overwrite; every writer of hpcgpu's puts it on: each file
    here is written by hpcgpu's own writer (a trainer's results and trace, a report's Markdown, a figure), none by
    the test."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import hpcgpu
    from hpcgpu import nn, optim
    from hpcgpu._outputs import save_figure
    from hpcgpu.report import read_run, write_report

    theirs = write_h5(tmp_path / "theirs.h5", x=np.zeros(2))
    assert written_by_hpcgpu(theirs) is False and written_by_hpcgpu(tmp_path / "theirs.h5", "json") is False
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    t = hpcgpu.Trainer(nn.Sequential(nn.Dense(3, 2)), nn.SoftmaxCrossEntropy(), optim.SGD(0.1), batch_size=10,
                       epochs=1, progress="none", out=str(tmp_path / "ours.h5"), trace=str(tmp_path / "ours.json"))
    t.fit((X, (X[:, 0] > 0).astype(np.int64)))
    t.save_results()  # to out
    t.write_trace()  # to trace
    t.close()
    (tmp_path / "report").mkdir()
    written = write_report([read_run(str(tmp_path / "ours.h5"))], str(tmp_path / "report"))
    os.replace(next(f for f in written if f.endswith(".md")), tmp_path / "ours.md")
    fig = plt.figure()
    save_figure(fig, tmp_path / "ours.png")
    plt.close(fig)
    (tmp_path / "notes.txt").write_text("mine\n")
    assert written_by_hpcgpu(tmp_path / "ours.h5") is True
    assert written_by_hpcgpu(tmp_path / "ours.json", "json") is True
    assert written_by_hpcgpu(tmp_path / "ours.png", "png") is True
    assert written_by_hpcgpu(tmp_path / "ours.md", "text") is True
    assert written_by_hpcgpu(tmp_path / "notes.txt") is None  # not HDF5 at all
    assert written_by_hpcgpu(tmp_path / "notes.txt", "text") is False
    outs = {"theirs.h5": "hdf5", "ours.h5": "hdf5", "ours.json": "json", "ours.png": "png", "ours.md": "text",
            "notes.txt": "text"}
    for name, kind in outs.items():
        err = claim_error([Output(tmp_path / name, "--out", kind=kind)])
        assert (err is None) == name.startswith("ours"), (name, err)
        assert claim_error([Output(tmp_path / name, "--out", kind=kind)], overwrite=True) is None


@pytest.mark.parametrize("locking", ["TRUE", "FALSE"])
def test_held_error_sees_a_writer(tmp_path, holder, monkeypatch, locking):
    path = tmp_path / "held.h5"
    write_h5(path, x=np.zeros(3))
    monkeypatch.setenv("HDF5_USE_FILE_LOCKING", locking)
    assert held_error(path) is None
    p = holder(path, {"HDF5_USE_FILE_LOCKING": locking})
    err = str(held_error(path, "--out"))
    assert "--out" in err and str(path) in err and "open for writing" in err
    assert ("HDF5_USE_FILE_LOCKING=FALSE" in err) == (locking == "FALSE")
    _release(p)
    assert held_error(path) is None


def test_a_reader_does_not_stop_a_write(tmp_path):
    path = tmp_path / "read.h5"
    write_h5(path, x=np.zeros(3))
    with h5py.File(path, "r"):
        assert held_error(path) is None


# -- the command lines -----------------------------------------------------------------


@pytest.fixture
def matrices(tmp_path):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(5, 4)), rng.normal(size=(4, 3))
    write_h5(tmp_path / "a.h5", A=a)
    write_h5(tmp_path / "b.h5", B=b)
    return a, b


@pytest.mark.mpi
def test_matmul_adds_its_dataset_and_keeps_the_others(tmp_path, matrices):
    a, b = matrices
    keep = tmp_path / "keep.h5"
    with h5py.File(keep, "w") as f:
        f["mine"] = np.arange(10)
        f["mine"].attrs["units"] = "s"
        f.attrs["project"] = "x"
    for rep in range(2):  # added, then replaced
        p = _mpi.run(2, ["-m", "hpcgpu", "matmul", tmp_path / "a.h5", tmp_path / "b.h5", "-o", f"{keep}:res/C"],
                     timeout=90)
        assert p.returncode == 0, p.stderr
        with h5py.File(keep) as f:
            assert sorted(f) == ["mine", "res"] and list(f["res"]) == ["C"], rep
            np.testing.assert_allclose(f["res/C"][()], a @ b, rtol=1e-12)
            assert f["res/C"].attrs["world_size"] == 2
            assert list(f["mine"][()]) == list(range(10)) and f["mine"].attrs["units"] == "s"
            assert f.attrs["project"] == "x"  # the root's attributes are the user's
    assert sorted(os.listdir(tmp_path)) == ["a.h5", "b.h5", "keep.h5"]


@pytest.mark.mpi
@pytest.mark.parametrize("out", ["a.h5:A", "a.h5", "a.h5:/A"])
def test_matmul_refuses_to_write_over_its_input(tmp_path, matrices, out):
    a, _ = matrices
    p = _mpi.run(2, ["-m", "hpcgpu", "matmul", tmp_path / "a.h5", tmp_path / "b.h5", "-o", f"{tmp_path}/{out}",
                     "--dtype", "float64"], timeout=90)
    if out == "a.h5":  # the default dataset is C: added beside A
        assert p.returncode == 0, p.stderr
        with h5py.File(tmp_path / "a.h5") as f:
            np.testing.assert_array_equal(f["A"][()], a)
            assert f["C"].shape == (5, 3)
        return
    line = _one_line_exit_2(p)
    assert "is also an input" in line and "a.h5" in line, line
    with h5py.File(tmp_path / "a.h5") as f:
        assert list(f) == ["A"]
        np.testing.assert_array_equal(f["A"][()], a)


@pytest.mark.mpi
@pytest.mark.parametrize("locking", ["TRUE", "FALSE"])
def test_train_refuses_an_output_another_process_writes(tmp_path, holder, locking):
    X, y = blobs(80)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y)
    held = tmp_path / "held.h5"
    write_h5(held, theirs=np.arange(5))
    env = {"HDF5_USE_FILE_LOCKING": locking}
    p_hold = holder(held, env)
    p = _mpi.run(2, ["-m", "hpcgpu.train", "--data", data, "--out", held, "--epochs", "1", "--hidden", "4",
                     "--batch-size", "16", "--progress", "none"], timeout=120, env=env)
    line = _one_line_exit_2(p)
    assert line.startswith("hpcgpu.train: error: --out ") and "open for writing" in line, line
    _release(p_hold)
    with h5py.File(held) as f:  # the other process's data, and what it wrote while holding the file
        assert sorted(f) == ["theirs", "written_while_held"]


@pytest.mark.mpi
def test_train_refuses_its_data_as_output(tmp_path):
    X, y = blobs(80)
    data = write_h5(tmp_path / "d.h5", train__X=X, train__y=y)
    p = _mpi.run(3, ["-m", "hpcgpu.train", "--data", data, "--out", data, "--epochs", "1", "--progress", "none"],
                 timeout=120)
    line = _one_line_exit_2(p)
    assert "--out" in line and "is also an input" in line, line
    with h5py.File(data) as f:
        assert sorted(f) == ["train"]


def test_a_device_many_processes_write_is_not_held(monkeypatch):
    """/dev/null as an output (benchmarks write there): every process has it open; nothing is lost."""
    for locking in ("TRUE", "FALSE"):
        monkeypatch.setenv("HDF5_USE_FILE_LOCKING", locking)
        assert held_error(os.devnull, "--out") is None


# -- outputs no other job can touch: links, locks, names, full disks -------------------------------------------------

def test_linked_sources_follow_external_soft_and_virtual_links(tmp_path, monkeypatch):
    """What an input reads through links, resolved as HDF5 does: a relative external link beside its file (not the
    working directory), a chain of links, a soft link, a virtual dataset's sources (``.`` its own file); a cycle
    ends."""
    from hpcgpu.io import linked_sources

    (tmp_path / "sub").mkdir()
    write_h5(tmp_path / "sub" / "data.h5", X=np.zeros(3))
    with h5py.File(tmp_path / "sub" / "mid.h5", "w") as f:
        f["g/X"] = h5py.ExternalLink("data.h5", "/X")
        f["loop"] = h5py.ExternalLink("mid.h5", "/loop")
    with h5py.File(tmp_path / "in.h5", "w") as f:
        f["train/X"] = h5py.ExternalLink("sub/mid.h5", "/g")
        f["alias"] = h5py.SoftLink("/train")
        f["own"] = np.ones(3)
        layout = h5py.VirtualLayout((3,), "f8")
        layout[...] = h5py.VirtualSource(".", "own", shape=(3,))
        f.create_virtual_dataset("v", layout)
    monkeypatch.chdir(tmp_path / "sub")  # a relative link is found beside its file, wherever the run starts
    src, sub = str(tmp_path / "in.h5"), str(tmp_path / "sub")
    assert linked_sources(src, "/train/X/X") == [
        (f"{sub}/mid.h5", "/g/X", f"the external link {src}:/train/X"),
        (f"{sub}/data.h5", "/X", f"the external link {src}:/train/X")]
    assert linked_sources(src, "alias")[0] == (src, "/train", f"the soft link {src}:/alias")
    assert linked_sources(src, "v") == [(src, "/own", f"the virtual dataset {src}:/v")]
    whole = {(os.path.basename(f), d) for f, d, _ in linked_sources(src)}
    assert {("mid.h5", "/g"), ("data.h5", "/X"), ("in.h5", "/own")} <= whole
    assert linked_sources(f"{sub}/mid.h5", "loop") == [(f"{sub}/mid.h5", "/loop",
                                                       f"the external link {sub}/mid.h5:/loop")]
    assert linked_sources(src, "own") == []


def test_a_name_too_long_for_its_temporary_is_refused_at_the_claim(tmp_path):
    """A legal name with no room for its temporary's suffix (.NAME.XXXXXXXX.tmp) is refused before any work, not
    after the training (File name too long, the run lost)."""
    from hpcgpu.io import TEMP_EXTRA

    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    fits = tmp_path / ("f" * (limit - TEMP_EXTRA - 3) + ".h5")
    long = tmp_path / ("x" * (limit - TEMP_EXTRA - 2) + ".h5")
    assert claim_error([Output(fits, "--out")]) is None
    assert str(claim_error([Output(long, "--out")])) == (
        f"--out {long}: its name is too long to write: hpcgpu writes .NAME.XXXXXXXX.tmp beside it first, "
        f"{limit + 1} bytes where {tmp_path} allows {limit}; give a name of at most {limit - TEMP_EXTRA} bytes")
    assert os.listdir(tmp_path) == []


_CLAIM_ELSEWHERE = """
import sys
from hpcgpu._outputs import Output, claim_error
print(claim_error([Output(sys.argv[1], "-o", dataset="C")], hold=[]))
"""


def test_a_held_output_is_refused_to_another_process_until_released(tmp_path):
    """The lock beside an output: another process's claim names this one (host, pid) while it holds it; released,
    the lock file is gone and the other process takes it."""
    import socket

    from hpcgpu._outputs import lock_path, release

    out = tmp_path / "r.h5"
    held = []
    assert claim_error([Output(out, "--out")], hold=held) is None and held == [lock_path(out)]
    assert (tmp_path / ".r.h5.lock").read_text() == f"{socket.gethostname()} {os.getpid()}\n"
    other = subprocess.run([sys.executable, "-c", _CLAIM_ELSEWHERE, str(out)], capture_output=True, text=True,
                           timeout=60, env=_mpi.environment())
    assert other.stdout == (f"-o {out}:C: is being written by another job (host {socket.gethostname()}, pid "
                            f"{os.getpid()}): wait for it to end, or write elsewhere\n"), other.stderr
    release([out])
    assert os.listdir(tmp_path) == []
    other = subprocess.run([sys.executable, "-c", _CLAIM_ELSEWHERE, str(out)], capture_output=True, text=True,
                           timeout=60, env=_mpi.environment())
    assert other.stdout == "None\n", other.stderr
    assert os.listdir(tmp_path) == []  # released at that process's end


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 3])
def test_a_dangling_link_as_an_input_is_one_line(tmp_path, matrices, nprocs):
    os.symlink("gone.h5", tmp_path / "dang.h5")
    p = _mpi.run(nprocs, ["-m", "hpcgpu", "matmul", tmp_path / "a.h5", f"{tmp_path}/dang.h5:B", "-o",
                          tmp_path / "c.h5"], timeout=90)
    assert _one_line_exit_2(p) == (f"hpcgpu: error: B {tmp_path}/dang.h5:B: a dangling symbolic link (to gone.h5): "
                                   "nothing to read")
    assert sorted(os.listdir(tmp_path)) == ["a.h5", "b.h5", "dang.h5"]


@pytest.fixture
def full_disk(tmp_path):
    """A small file system (tmpfs, root only) holding an earlier file, filled but for ``free`` bytes:
    ``make(free) -> directory``."""
    import shutil

    mounted = []

    def make(free):
        if os.geteuid() != 0 or not shutil.which("mount"):
            pytest.skip("a full file system needs root (mount -t tmpfs)")
        d = tmp_path / "full"
        d.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(d)],
                          capture_output=True).returncode:
            pytest.skip("mount -t tmpfs is not allowed here")
        mounted.append(d)
        with h5py.File(d / "prev.h5", "w") as f:  # earlier outputs, which must survive whole
            f.attrs["hpcgpu_version"] = "0"
            f["earlier"] = np.arange(4.0)
        (d / "report.md").write_text("<!-- written by hpcgpu 0 -->\n")
        with open(d / "filler", "wb", buffering=0) as f:
            try:
                while f.write(b"\0" * 4096):
                    pass
            except OSError:
                pass
            f.truncate(max(0, os.fstat(f.fileno()).st_size - free))
        return d

    yield make
    for d in mounted:
        subprocess.run(["umount", "-l", str(d)], check=False)


def _files(d):
    return {n: (d / n).read_bytes() for n in sorted(os.listdir(d)) if n != "filler"}


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 3])
@pytest.mark.parametrize("into", ["new.h5", "prev.h5"])
@pytest.mark.parametrize("free", [0, 16 << 10])
def test_matmul_on_a_full_disk_is_one_line(tmp_path, full_disk, nprocs, into, free):
    """No room for C, in a new file or added to an existing one: one line, exit 2, the earlier file whole, no
    temporary (a few KiB free segfaulted inside HDF5 and published a broken file, "wrote" and exit 0 before; the
    existing file's copy was a RuntimeError traceback)."""
    rng = np.random.default_rng(0)
    write_h5(tmp_path / "a.h5", A=rng.normal(size=(40, 40)))
    write_h5(tmp_path / "b.h5", B=rng.normal(size=(40, 40)))
    d = full_disk(free)
    before = _files(d)
    p = _mpi.run(nprocs, ["-m", "hpcgpu", "matmul", tmp_path / "a.h5", tmp_path / "b.h5", "-o", f"{d}/{into}:C"],
                 timeout=120)
    assert _one_line_exit_2(p) == (f"hpcgpu: error: -o {d}/{into}:C: No space left on device: nothing was written "
                                   "(free some space, or write elsewhere)")
    assert _files(d) == before  # no temporary, no lock file, the earlier file as it was


def test_reports_on_a_full_disk_are_one_line(full_disk):
    """A report's PNG and Markdown on a full disk: one line naming the file, the earlier file whole, no temporary."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hpcgpu._outputs import save_figure, write_text

    d = full_disk(0)
    before = _files(d)
    fig = plt.figure()
    fig.gca().plot(np.arange(100.0))
    try:
        with pytest.raises(OSError) as png:
            save_figure(fig, d / "learning.png")
    finally:
        plt.close(fig)
    with pytest.raises(OSError) as text:
        write_text(d / "report.md", "<!-- written by hpcgpu 0 -->\n" + "| a row |\n" * 2000)
    assert str(png.value) == f"{d}/learning.png: No space left on device: nothing was written"
    assert str(text.value) == f"{d}/report.md: No space left on device: nothing was written"
    assert _files(d) == before


_HELD_UNTIL_CLOSE = """
import os, subprocess, sys, numpy as np, hpcgpu
from hpcgpu import nn, optim

def other():  # another process's claim of the trainer's out
    return subprocess.run([sys.executable, "-c", sys.argv[1], "r.h5"], capture_output=True, text=True).stdout.strip()

rng = np.random.default_rng(0)
X = rng.normal(size=(40, 3))
t = hpcgpu.Trainer(nn.Sequential(nn.Dense(3, 2)), nn.SoftmaxCrossEntropy(), optim.SGD(0.1), batch_size=10,
                   epochs=1, progress="none", out="r.h5", runtime=hpcgpu.init("cpu"))
t.fit((X, (X[:, 0] > 0).astype(np.int64)))
print(other().replace(str(os.getpid()), "PID"))
t.close()
print(other(), sorted(os.listdir(".")))
"""


@pytest.mark.mpi
def test_a_trainer_holds_its_outputs_until_it_is_closed(tmp_path):
    """Library mode: the outputs a Trainer claimed are held while it lives (another process is refused) and let go
    by close(), not only at the process's end (a notebook's closed trainer kept other jobs out)."""
    import socket

    p = _mpi.run(1, ["-c", _HELD_UNTIL_CLOSE, _CLAIM_ELSEWHERE], timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        f"-o r.h5:C: is being written by another job (host {socket.gethostname()}, pid PID): wait for it to end, or "
        "write elsewhere",
        "None []"], p.stdout  # let go: no lock file left either


def test_a_missing_absolute_link_target_is_found_where_hdf5_finds_it(tmp_path, monkeypatch):
    """HDF5 opens a missing absolute target by its file name in the linking file's directory (before the working
    directory's): the output policy sees the file HDF5 reads, so that file is never replaced as an output."""
    from hpcgpu.io import linked_sources

    (tmp_path / "in").mkdir()
    (tmp_path / "cwd").mkdir()
    for where, value in (("in", 1), ("cwd", 2)):
        with h5py.File(tmp_path / where / "t.h5", "w") as f:
            f["X"] = np.array([value])
    src = str(tmp_path / "in" / "links.h5")
    with h5py.File(src, "w") as f:
        f["L"] = h5py.ExternalLink(str(tmp_path / "gone" / "t.h5"), "/X")
    monkeypatch.chdir(tmp_path / "cwd")
    with h5py.File(src, "r") as f:
        read = f["L"].file.filename
    assert read == str(tmp_path / "in" / "t.h5")
    assert linked_sources(src) == [(read, "/X", f"the external link {src}:/L")]


@pytest.mark.parametrize(("code", "held"), [("ENOLCK", False), ("EIO", True)])
def test_a_failing_lock_is_nothing_held_or_one_agreed_line(tmp_path, monkeypatch, code, held):
    """flock failing because the file system has no locks holds nothing; any other failure (EIO on NFS) is one
    agreed line on every rank, never an exception on the checking rank while the others wait."""
    import errno
    import fcntl

    from mpi4py import MPI

    from hpcgpu import AgreedError
    from hpcgpu._outputs import claim, lock_path

    def failing(fd, op):
        raise OSError(getattr(errno, code), os.strerror(getattr(errno, code)))

    monkeypatch.setattr(fcntl, "flock", failing)
    out = tmp_path / "r.h5"
    if not held:
        claim([Output(out, "-o")], comm=MPI.COMM_SELF)
        assert not os.path.exists(lock_path(out))
        return
    with pytest.raises(OSError) as e:
        claim([Output(out, "-o")], comm=MPI.COMM_SELF)
    assert isinstance(e.value, AgreedError)
    assert str(e.value) == f"-o {out}: cannot lock its lock file {lock_path(out)} (Input/output error)"
