"""The write path's JSON (`_writer.rows_json`): the compiled writer says what json.dumps says, SQLite
reads it back, and whatever the kernel does not take goes to json's encoder instead."""

import json
import sqlite3

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipy_memory import _kernels, _writer
from ipy_memory._validate import json_encoder

compiled = pytest.mark.skipif(not _kernels.COMPILED, reason="IPY_MEMORY_PURE_PYTHON is set")

_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40) | st.sampled_from(
    ["", '"', "\\", "a\"b\\c", "\x00\x01\x1f\x7f", "\b\f\n\r\t", "é中文😀", "\u2028\u2029", "x" * 5000])
_SCALAR = (st.none() | st.booleans() | st.integers() | st.integers(-2**200, 2**200)
           | st.floats(allow_nan=False, allow_infinity=False) | _TEXT)
_ROWS = st.lists(st.lists(_SCALAR, max_size=12).map(tuple) | st.lists(_SCALAR, max_size=3) | _SCALAR, max_size=30)


def _compact(rows) -> str:
    return json.dumps(rows, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


@compiled
@settings(max_examples=400, deadline=None)
@given(_ROWS)
def test_rows_json_writes_what_json_dumps_writes(rows):
    assert _kernels.rows_json(rows) == _compact(rows)
    assert _kernels.rows_json_utf8(rows) == _compact(rows).encode()


@compiled
@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([0.0, -0.0, 0.6, 0.1 + 0.2, 1e16, 5e-324, -1e300, 1.0]) | st.floats(allow_nan=False,
       allow_infinity=False), max_size=40), st.lists(st.sampled_from([0, -1, 9, 10, 2**63 - 1, -2**63, 2**63, -2**63 - 1])
       | st.integers(), max_size=20))
def test_rows_json_repeated_floats_and_ints_as_json_writes_them(floats, ints):
    """Floats written again are copied from the last four written (bit for bit: -0.0 is not 0.0), ints
    without snprintf: as json writes them, row after row."""
    rows = [tuple(floats), tuple(ints), tuple(floats[::-1]), (*ints, *floats)]
    assert _kernels.rows_json(rows) == _compact(rows)


@compiled
def test_rows_json_refuses_what_json_would_write_otherwise():
    for f in (_kernels.rows_json, _kernels.rows_json_utf8):
        for bad in ([(1, {"a": 1})], [(1, [2])], [np.float64(0.5)], [(np.int64(3),)], [object()]):
            with pytest.raises(TypeError):
                f(bad)
        for bad in ([float("nan")], [(1, float("inf"))]):
            with pytest.raises(ValueError):
                f(bad)
        with pytest.raises(UnicodeEncodeError):
            f([("lone \ud800",)])
        with pytest.raises(TypeError):
            f((1, 2))


# what SQLite reads back as it was: 64-bit ints, floats its parser rounds exactly (the writer checks a
# batch's floats, _writer._exact_in_json), text without NUL
_STORED = (st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.integers(-2**40, 2**40).map(lambda i: i / 8)
           | _TEXT.filter(lambda t: "\x00" not in t))


@settings(max_examples=100, deadline=None)
@given(st.lists(_STORED, max_size=20))
def test_sqlite_reads_the_rows_back(values):
    db = sqlite3.connect(":memory:")
    got = [r[0] for r in db.execute("SELECT value FROM json_each(?)", (_writer.rows_json(values),))]
    want = [int(v) if isinstance(v, bool) else v for v in values]     # (JSON's true reads back as 1)
    assert got == want
    # as the bulk inserts bind it: UTF-8 bytes (or json's str) read as text
    got = [r[0] for r in db.execute("SELECT value FROM json_each(CAST(? AS TEXT))", (_writer.rows_json(values, utf8=True),))]
    assert got == want


def test_what_the_kernel_refuses_goes_to_json():
    rows = [(np.float64(0.25), "a"), (True, None), ({"k": [1]},)]
    assert json.loads(_writer.rows_json(rows)) == json.loads(json_encoder().encode(rows))
    with pytest.raises(ValueError, match="JSON compliant"):
        _writer.rows_json([(1.0, float("nan"))])                   # json's own error
    assert _writer.rows_json(rows, utf8=True) == _writer.rows_json(rows)      # (json's str: CAST(? AS TEXT) keeps it)
