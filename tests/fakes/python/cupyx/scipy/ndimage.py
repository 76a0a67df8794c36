"""Stand-in for cupyx.scipy.ndimage: imported by desispec.gpu, never used by
redistribute_gpu_ranks."""
