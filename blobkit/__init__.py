"""blobkit: verified training kits from company service twins."""

__version__ = "0.1.0"
