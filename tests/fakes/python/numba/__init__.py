"""Stand-in for numba (desispec.gpu imports numba.cuda)."""
