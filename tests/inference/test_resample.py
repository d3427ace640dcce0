"""The sparse final resize equals the project's MATLAB-bicubic imresize."""

from __future__ import annotations

import numpy as np
import pytest

from sr.inference.resample import axis_matrix, resize_to
from sr.resize import imresize, resize_matrix


@pytest.mark.parametrize(
    "shape,size",
    [((17, 23, 3), (34, 46)), ((50, 40, 3), (75, 60)), ((64, 64, 1), (20, 31)), ((1, 1, 3), (3, 5)),
     ((5, 7), (5, 14)), ((30, 20, 3), (7, 90)), ((9, 9, 3), (9, 9))],
)
def test_matches_imresize(shape, size):
    x = np.random.default_rng(0).random(shape).astype(np.float32)
    out = resize_to(x, *size)
    assert out.shape == size + shape[2:] and out.dtype == np.float32
    ref = imresize(x.astype(np.float64), size=size)
    np.testing.assert_allclose(out, ref, atol=1e-5)


@pytest.mark.parametrize("n_in,n_out", [(10, 25), (25, 10), (7, 3), (1, 4), (100, 33)])
def test_axis_matrix_is_the_dense_matrix(n_in, n_out):
    sparse = axis_matrix(n_in, n_out)
    assert sparse.nnz <= n_out * (int(np.ceil(4 * max(1, n_in / n_out))) + 2)  # banded
    np.testing.assert_allclose(sparse.toarray(), resize_matrix(n_in, n_out, n_out / n_in), atol=1e-6)


def test_rejects_empty_sizes():
    with pytest.raises(ValueError, match="empty"):
        resize_to(np.zeros((4, 4, 3), np.float32), 0, 3)
