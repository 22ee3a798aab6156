"""Front-ends: one module per platform, each turning platform events into router calls."""
