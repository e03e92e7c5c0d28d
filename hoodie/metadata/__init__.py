"""The metadata table (``.hoodie/metadata``): reading it and writing its commits."""
