"""Stand-in for numba.cuda: a GPU is available."""


def is_available():
    return True
