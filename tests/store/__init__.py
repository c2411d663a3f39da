"""Tests of bwprof/store/."""
