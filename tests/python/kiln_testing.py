"""Helpers the Python tests share."""
import numpy as np


def close(a, b, tol=1e-5):
    """Elementwise equal within tol (relative and absolute); a and b may be
    kiln tensors, NumPy arrays or lists."""
    return np.allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)
