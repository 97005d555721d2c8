"""specnb."""
