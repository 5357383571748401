"""The delivery console on the internal listener: its routes, what it reads, its pages."""
