"""Column: growable numpy columns (ipy_memory/_columns.py), and the buffers they grow into (_pages.py)."""

import mmap

import numpy as np
import pytest

from ipy_memory import _pages
from ipy_memory._columns import Column


@pytest.mark.parametrize("dtype,width,fill", [(np.int32, None, -1), (np.float64, None, np.inf),
                                              (np.bool_, None, False), (np.float16, 8, 0)])
def test_growth_keeps_the_rows_and_pads_with_the_fill(dtype, width, fill):
    rng = np.random.default_rng(1)
    col, rows = Column(dtype, width=width, fill=fill), []
    for n in (1, 15, 1, 40, 300, 5000):               # past several doublings of the 16-row start
        part = rng.integers(0, 2 if dtype is np.bool_ else 100, (n, width) if width else n).astype(dtype)
        col.extend(part)
        rows.append(part)
        assert len(col) == col.size == sum(map(len, rows))
        np.testing.assert_array_equal(col.view, np.concatenate(rows))
        spare = col._data[col.size:]                  # rows not written yet hold the fill
        assert (spare == fill).all()
        padded = col.padded()
        assert len(padded) == col.size + 1 and (padded[-1] == fill).all()
        np.testing.assert_array_equal(padded[:-1], col.view)


def test_padded_grows_by_a_sixteenth_and_adopt_takes_the_array():
    col = Column(np.int32, fill=-1)
    loaded = np.arange(1600, dtype=np.int32)
    col.adopt(loaded)
    assert col._data is loaded                        # not copied
    padded = col.padded()
    assert padded[-1] == -1 and len(col._data) == 1601 + 1600 // 16 + 16
    col.extend([7])
    assert col.view[-1] == 7 and col.padded()[-1] == -1
    with pytest.raises(ValueError):
        col.adopt(loaded)                             # only into an empty column


_BIG = 1 << 22                                        # _pages.MAPPED_FROM on Linux


@pytest.mark.parametrize("shape,dtype", [((3, 5), np.float16), (7, np.bool_), (_BIG // 8 + 1, np.int64),
                                         ((_BIG // 384, 384), np.float16), ((2, 0), np.int32)])
def test_pages_zeros_is_np_zeros_and_maps_large_buffers_privately(shape, dtype):
    a = _pages.zeros(shape, dtype)
    assert a.shape == np.zeros(shape, dtype).shape and a.dtype == np.dtype(dtype)
    assert a.flags.c_contiguous and a.flags.writeable and not a.any()
    mapped = _pages.MAPPED_FROM is not None and a.nbytes >= _pages.MAPPED_FROM
    assert isinstance(a.base, mmap.mmap) == mapped    # large: not numpy's allocator (no huge-page advice)
    if a.size:
        a.reshape(-1)[-1] = 1
        assert a.sum() == 1


def test_pages_copy_converts_and_pads_with_zeros():
    values = np.array([3.0, 1.5, 7.0])
    out = _pages.copy(values, np.int32, extra=2)
    assert out.dtype == np.int32 and out.tolist() == [3, 1, 7, 0, 0]
    big = np.arange(_BIG // 8, dtype=np.float32)
    assert isinstance(_pages.copy(big, np.float64).base, mmap.mmap) == (_pages.MAPPED_FROM is not None)
    np.testing.assert_array_equal(_pages.copy(big, np.float64), big.astype(np.float64))


def test_pages_keep_numpys_allocator_where_numpy_gives_no_advice(monkeypatch):
    monkeypatch.setattr(_pages, "MAPPED_FROM", None)           # not Linux
    a = _pages.zeros((1 << 20, 8), np.float32)
    assert not isinstance(a.base, mmap.mmap) and a.shape == (1 << 20, 8) and not a.any()


@pytest.mark.skipif(_pages.MAPPED_FROM is None, reason="numpy advises huge pages on Linux only")
def test_the_index_buffers_come_from_private_mappings():
    from ipy_memory import _kernels, _postings, _wordkernels
    from ipy_memory._colscan import BLOCK, ColumnScan
    col = Column(np.float16, width=384)
    for _ in range(8):
        col.extend(np.ones((1000, 384), np.float16))          # 6 MB: past the threshold
    assert isinstance(col._data.base, mmap.mmap) and (col.view == 1).all()
    if _kernels.COMPILED:
        assert isinstance(_wordkernels.word_table(1 << 20).base, mmap.mmap)
    assert all(isinstance(a.base, mmap.mmap) for a in _postings._empty(1 << 20))
    scan = ColumnScan(384)
    scan.append(np.ones((BLOCK // 4, 384), np.float16))
    assert isinstance(scan.blocks[0].base, mmap.mmap)
