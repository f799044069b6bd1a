"""Row-major products as column-major BLAS calls, without copies: shared by the host's
scipy sgemm/dgemm (kernels/gemm.py) and cuBLAS by pointer (kernels/cublas_direct.py)."""


def as_fortran(m):
    """(F-ordered array, trans flag) whose op() is ``m``, or None when ``m`` is neither order."""
    if m.flags.f_contiguous:
        return m, 0
    if m.flags.c_contiguous:
        return m.T, 1
    return None


def column_major(a, b, out):
    """out = a @ b as (c, (x, trans_x), (y, trans_y)) with c, x, y Fortran-ordered and
    c = op(x) @ op(y); a C-ordered ``out`` is computed as its transpose, out.T = b.T @ a.T.
    None where an operand would need a copy."""
    if out.flags.f_contiguous:
        c, x, y = out, a, b
    elif out.flags.c_contiguous:
        c, x, y = out.T, b.T, a.T
    else:
        return None
    fx, fy = as_fortran(x), as_fortran(y)
    if fx is None or fy is None:
        return None
    return c, fx, fy
