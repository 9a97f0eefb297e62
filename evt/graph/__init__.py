"""Capture-side stage: graph passes on the joint forward+backward aten graph."""
