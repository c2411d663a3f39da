"""Tests of bwprof/render/."""
