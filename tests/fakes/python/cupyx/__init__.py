"""Stand-in for cupyx (desispec.gpu imports cupyx.scipy.ndimage)."""
