"""Load drivers that exercise the kit from the outside, over loopback HTTP only."""
