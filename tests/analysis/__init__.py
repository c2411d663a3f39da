"""Tests of bwprof/analysis/."""
