"""torch-chaos: chaos testing for PyTorch training jobs."""
__version__ = "0.1.0"
