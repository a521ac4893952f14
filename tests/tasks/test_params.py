"""The task table readers, the ledger's schema rule, the journal's framing and the chunk sizes."""

import json

import h5py
import numpy as np
import pytest

from hpcgpu.tasks import Params, read_params
from hpcgpu.tasks._farm import chunk_size
from hpcgpu.tasks._store import Journal, Ledger, Record, SchemaError


def test_csv_types_per_column(tmp_path):
    p = tmp_path / "p.csv"
    p.write_text("n,x,name\n1,0.5,a\n2,3,b c\n\n30,1e-3,d\n")
    t = read_params(str(p))
    assert t.n == 3 and t.names == ("n", "x", "name")
    assert t.columns["n"].dtype == np.int64 and t.columns["x"].dtype == np.float64
    assert t.row(1) == {"n": 2, "x": 3.0, "name": "b c"} and isinstance(t.row(1)["n"], int)


def test_jsonl_and_hdf5_give_the_same_table(tmp_path):
    rows = [{"k": i, "w": [i, i + 1.5], "s": f"s{i}", "on": i % 2 == 0} for i in range(4)]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    a = read_params(str(tmp_path / "p.jsonl"))
    with h5py.File(tmp_path / "p.h5", "w") as f:
        g = f.create_group("params")
        g["k"], g["w"] = np.arange(4), np.array([r["w"] for r in rows])
        g["s"] = np.array([r["s"] for r in rows], dtype=h5py.string_dtype())
        g["on"] = np.array([r["on"] for r in rows])
    b = read_params(str(tmp_path / "p.h5"))
    assert a.digest() == b.digest() == read_params(rows).digest()
    np.testing.assert_array_equal(a.row(2)["w"], [2, 3.5])
    assert b.row(3)["s"] == "s3" and a.row(3)["on"] is False


@pytest.mark.parametrize("text, msg", [
    ("a,a\n1,2\n", "repeated column name"),
    ("a b\n1\n", "'a b' is not a Python identifier"),
    ("a,b\n1,\n", "line 2: column 'b' is empty"),
])
def test_csv_errors_name_the_line(tmp_path, text, msg):
    (tmp_path / "p.csv").write_text(text)
    with pytest.raises(ValueError, match=msg):
        read_params(str(tmp_path / "p.csv"), "--params")


def test_other_errors(tmp_path):
    (tmp_path / "p.txt").write_text("a\n1\n")
    with pytest.raises(ValueError, match="unknown format"):
        read_params(str(tmp_path / "p.txt"))
    (tmp_path / "p.jsonl").write_text('{"a": 1}\n{"b": 2}\n')
    with pytest.raises(ValueError, match="line 2: keys"):
        read_params(str(tmp_path / "p.jsonl"))
    (tmp_path / "p.h5").write_bytes(b"not hdf5")
    with pytest.raises(ValueError, match="not a readable HDF5"):
        read_params(str(tmp_path / "p.h5"))
    with pytest.raises(ValueError, match="different lengths"):
        read_params({"a": [1, 2], "b": [1]})
    with pytest.raises(ValueError, match="holds lists of different shapes"):
        read_params([{"a": [1, 2]}, {"a": [1]}])


def test_first_result_fixes_the_names_and_dtypes():
    led = Ledger(Params({"a": np.arange(3)}), "f")
    led.apply(Record(0, True, 0, 0.1, 1, values={"x": 1.5, "v": np.zeros(2, np.float32)}))
    with pytest.raises(SchemaError, match="task 1: result 'v' is of dtype float64, the first result's was of dtype "
                                          "float32: the function must return the same dtypes"):
        led.apply(Record(1, True, 0, 0.1, 1, values={"x": 2.5, "v": np.zeros(3)}))
    with pytest.raises(SchemaError, match="returned results \\['x'\\], the first result had \\['v', 'x'\\]"):
        led.apply(Record(1, True, 0, 0.1, 1, values={"x": 2.5}))
    with pytest.raises(SchemaError, match="returned list, not a dict"):
        led.apply(Record(2, True, 0, 0.1, 1, values=[1]))
    led.apply(Record(2, False, 1, 0.1, 2, error="ValueError: no"))
    assert led.counts() == {"pending": 1, "done": 1, "failed": 1}
    assert led.todo() == [1] and led.todo(retry_failed=True) == [1, 2]  # failed stays failed unless retried
    assert np.isnan(led.results["x"][2]) and led.attempts[2] == 2


def test_a_csv_with_a_byte_order_mark_reads_as_without(tmp_path):
    """Spreadsheet programs start a UTF-8 CSV with a BOM: it is not part of the first column's name."""
    (tmp_path / "p.csv").write_bytes("\ufeffa,b\n1,x\n2,y\n".encode())
    t = read_params(str(tmp_path / "p.csv"))
    assert t.names == ("a", "b") and list(t.columns["a"]) == [1, 2]


def test_journal_ignores_a_frame_cut_short(tmp_path):
    j = Journal(str(tmp_path / "j"), {"function": "f"})
    j.restart()
    j.buffer += [Record(0, True, 0, 1.0, 1, values={"x": 1})]
    j.flush()
    j.buffer += [Record(1, True, 0, 1.0, 1, values={"x": 2})]
    j.flush()
    data = (tmp_path / "j").read_bytes()
    (tmp_path / "j").write_bytes(data[:-3])  # a kill in the middle of the second append
    header, recs = Journal.read(str(tmp_path / "j"))
    assert header == {"function": "f"} and [r.task for r in recs] == [0]


def test_chunks_shrink_to_one():
    sizes, left = [], 1000
    while left:
        sizes.append(chunk_size(left, 7))
        left -= sizes[-1]
    assert sizes[0] == 72 and sizes[-1] == 1 and sizes == sorted(sizes, reverse=True)
