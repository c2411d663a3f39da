"""Verdicts: whether a box is healthy. `bands` holds what a healthy part reaches, `spec` reads
a spec file that overrides it, `judge` holds each measured figure against its band, `fleet`
lays many boxes side by side. Report-layer code: it reads run folders, never a GPU."""
